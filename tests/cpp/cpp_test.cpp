/*
 * The C++ layer (include/ferry/ferry.hpp): frames between a C++ publisher and subscriber in two
 * processes, loans and samples that give themselves back (on scope exit and on an exception),
 * moved handles that are destroyed once, waitset membership that follows its subscriber, the
 * codes that exceptions carry, the typed loans and views, and compile-time checks of which
 * handles copy and move. Every case ends with the teardown checks of testutil (no descriptor,
 * mapping, status or socket file left).
 */
#include <ferry/ferry.hpp>

#include <array>
#include <cerrno>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// testutil.h is C11; its one word that C++ spells otherwise is _Noreturn.
#define _Noreturn [[noreturn]]
extern "C" {
#include "testutil.h"
}
#undef _Noreturn

using namespace std::chrono_literals;

/* --- compile-time checks ------------------------------------------------------------------- */

template <class T>
constexpr bool move_only = !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
                           std::is_nothrow_move_constructible_v<T> &&
                           std::is_nothrow_move_assignable_v<T> &&
                           std::is_nothrow_destructible_v<T>;
static_assert(move_only<ferry::Node>);
static_assert(move_only<ferry::Publisher>);
static_assert(move_only<ferry::Subscriber>);
static_assert(move_only<ferry::WaitSet>);
static_assert(move_only<ferry::Loan>);
static_assert(move_only<ferry::Sample>);
static_assert(move_only<ferry::ImageLoan>);
static_assert(move_only<ferry::PointCloudLoan>);
static_assert(move_only<ferry::TensorLoan>);
static_assert(std::is_base_of_v<std::system_error, ferry::error>);
static_assert(std::is_error_code_enum_v<ferry_err>);
static_assert(std::is_same_v<decltype(std::declval<ferry::Sample &>().bytes()),
                             ferry::span<const std::byte>>);
#if defined(__cpp_lib_span) && __cpp_lib_span >= 202002L
static_assert(std::is_same_v<ferry::span<int>, std::span<int>>);
#endif

/* --- helpers ---------------------------------------------------------------------------------- */

static const ferry::Type raw_type = ferry::Type::named("test/cpp");

static ferry::NodeOptions test_node(const char *name)
{
    return ferry::NodeOptions().dir(tu_dir()).domain(tu_domain()).name(name);
}

static const ferry::duration wait_ns{TU_WAIT_NS};

// expr must throw a ferry::error of code; its code(), category and what() are checked too.
#define EXPECT_ERROR(expr, code)                                                               \
    do {                                                                                       \
        bool thrown_ = false;                                                                  \
        try {                                                                                  \
            (void)(expr);                                                                      \
        } catch (const ferry::error &e_) {                                                     \
            thrown_ = true;                                                                    \
            check_error(__FILE__, __LINE__, #expr, e_, (code));                                \
        }                                                                                      \
        TU_CHECK_MSG(thrown_, "%s did not throw %s", #expr, ferry_errname(code));              \
    } while (0)

static void check_error(const char *file, int line, const char *expr, const ferry::error &e,
                        ferry_err code)
{
    if (e.err() != code)
        tu_fail(file, line, "%s threw %s (%s), expected %s", expr, ferry_errname(e.err()),
                e.what(), ferry_errname(code));
    if (e.code() != code || e.code() != std::error_code(code) ||
        std::string_view(e.code().category().name()) != "ferry")
        tu_fail(file, line, "%s: code() is %s:%d", expr, e.code().category().name(),
                e.code().value());
    if (std::string_view(e.what()).find(ferry_strerror(code)) == std::string_view::npos)
        tu_fail(file, line, "%s: what() \"%s\" lacks \"%s\"", expr, e.what(), ferry_strerror(code));
}

// Runs one case between tu_begin and tu_end: its handles are gone before the teardown checks.
static void run(const char *name, void (*fn)())
{
    tu_begin(name);
    try {
        fn();
    } catch (const std::exception &e) {
        TU_FAIL("%s: unexpected exception: %s", name, e.what());
    }
    tu_end();
}

// Publishers of this process take back the chunks their subscribers released.
static void chunks_back(ferry::Publisher &pub)
{
    ferry_time t0 = ferry_now();
    ferry_publisher_stats st = pub.stats();
    while (st.chunks_in_use + st.chunks_loaned != 0 && tu_since(t0) < TU_WAIT_NS) {
        pub.poll(1ms);
        st = pub.stats();
    }
    TU_EQ_U64(st.chunks_loaned, 0);
    TU_EQ_U64(st.chunks_in_use, 0);
    TU_EQ_U64(st.chunks_free, st.chunks_total);
}

/* --- two processes ---------------------------------------------------------------------------- */

static constexpr std::size_t FRAME = 1280 * 720 * 3;
static constexpr uint64_t FRAMES = 40;
static constexpr uint32_t IMAGES = 3;

struct pair_args {
    tu_pipe done; // the subscriber released everything
};

static int publisher_child(void *arg)
{
    auto *a = static_cast<pair_args *>(arg);
    {
        ferry::Node node(test_node("cpp_pub"));
        ferry::Publisher pub(node, "/cpp/frames", raw_type,
                             ferry::PublisherOptions()
                                 .max_sample_size(FRAME)
                                 .pool_bytes(32 * FRAME)
                                 .admit_blocking()
                                 .block_timeout(5s));
        ferry::Publisher img(node, "/cpp/image", ferry::image_type);
        if (!pub.wait_subscribers(1, wait_ns) || !img.wait_subscribers(1, wait_ns))
            TU_FAIL("no subscriber came");
        for (uint64_t seq = 1; seq <= FRAMES; seq++) {
            ferry::Loan loan = pub.loan(FRAME);
            tu_fill(loan.data(), loan.size(), seq);
            pub.publish(std::move(loan));
            TU_CHECK(!loan);
        }
        for (uint32_t i = 1; i <= IMAGES; i++) {
            ferry::ImageLoan l = img.loan_image(64, 48, "mono8");
            for (std::byte &b : l.data())
                b = std::byte(i);
            l.frame_id("cam").stamp(ferry_stamp{static_cast<int32_t>(i), 5});
            img.publish(std::move(l));
        }
        tu_recv(&a->done, TU_WAIT_MS);
        chunks_back(pub);
        chunks_back(img);
        TU_EQ_U64(pub.stats().published, FRAMES);
        TU_EQ_U64(pub.stats().bytes_copied, 0);
    }
    tu_check_child_teardown();
    return 0;
}

static void test_two_processes()
{
    pair_args a{tu_pipe_make()};
    ferry::Node node(test_node("cpp_sub"));
    ferry::Subscriber sub(node, "/cpp/frames", raw_type,
                          ferry::SubscriberOptions().depth(4).overflow(FERRY_OVERFLOW_BLOCK));
    ferry::Subscriber isub(node, "/cpp/image", ferry::image_type,
                           ferry::SubscriberOptions().depth(IMAGES).background());
    TU_CHECK(ferry::SubscriberOptions().background().raw().background);
    pid_t pid = tu_fork(publisher_child, &a, 60);
    // Each subscriber's housekeeping runs in its own calls: connect both before the stream.
    TU_CHECK(sub.wait_publishers(1, wait_ns));
    TU_CHECK(isub.wait_publishers(1, wait_ns));

    for (uint64_t seq = 1; seq <= FRAMES; seq++) {
        std::optional<ferry::Sample> s = sub.take(wait_ns);
        TU_CHECK_MSG(s.has_value(), "frame %" PRIu64 " did not come", seq);
        TU_EQ_U64(s->sequence(), seq);
        TU_SAMPLE_INTACT(&s->raw(), FRAME);
        TU_EQ_U64(s->bytes().size(), FRAME);
        TU_EQ_U64(sub.stats().held, 1);
    } // each sample released as its optional goes
    ferry_subscriber_stats st = sub.stats();
    TU_EQ_U64(st.held, 0);
    TU_EQ_U64(st.received, FRAMES);
    TU_EQ_U64(st.dropped, 0);

    for (uint32_t i = 1; i <= IMAGES; i++) {
        std::optional<ferry::Sample> s = isub.take(wait_ns);
        TU_CHECK(s.has_value());
        ferry_image_view v = ferry::image_view(*s);
        TU_EQ_U64(v.header.width, 64);
        TU_EQ_U64(v.header.height, 48);
        TU_EQ_STR(v.header.encoding, "mono8");
        TU_EQ_STR(v.header.frame_id, "cam");
        TU_EQ_U64(v.header.stamp.sec, i);
        TU_EQ_U64(v.data_size, 64 * 48);
        const auto *px = static_cast<const unsigned char *>(v.data);
        for (std::size_t k = 0; k < v.data_size; k++)
            TU_EQ_U64(px[k], i);
    }
    TU_EQ_U64(isub.stats().held, 0);
    tu_send(&a.done, 1);
    TU_CHILD_OK(pid);
}

/* --- loans and samples release themselves ----------------------------------------------------- */

static void test_release_themselves()
{
    ferry::Node node(test_node("cpp_local"));
    ferry::Publisher pub(node, "/cpp/local", raw_type,
                         ferry::PublisherOptions().pool_bytes(1 << 20).max_sample_size(4096));
    ferry::Subscriber sub(node, "/cpp/local", raw_type, ferry::SubscriberOptions().depth(8));
    tu_connect_local(pub.get(), 1, sub.get(), 1);

    {
        ferry::Loan loan = pub.loan(1000);
        TU_EQ_U64(loan.size(), 1000);
        TU_EQ_U64(loan.bytes().size(), 1000);
        TU_EQ_U64(loan.as<uint32_t>().size(), 250);
        TU_EQ_U64(pub.stats().chunks_loaned, 1);
    }
    TU_EQ_U64(pub.stats().chunks_loaned, 0);

    for (uint64_t seq = 1; seq <= 2; seq++) {
        ferry::Loan l = pub.loan(100);
        tu_fill(l.data(), l.size(), seq);
        pub.publish(std::move(l));
    }
    {
        std::optional<ferry::Sample> a = sub.take(wait_ns), b = sub.take(wait_ns);
        TU_CHECK(a && b);
        TU_SAMPLE_INTACT(&a->raw(), 100);
        TU_SAMPLE_INTACT(&b->raw(), 100);
        TU_EQ_U64(sub.stats().held, 2);
    }
    TU_EQ_U64(sub.stats().held, 0);
    chunks_back(pub);

    // An exception unwinds a loan, a published frame's sample and a second loan.
    bool caught = false;
    try {
        ferry::Loan l = pub.loan(100);
        tu_fill(l.data(), l.size(), 3);
        pub.publish(std::move(l));
        std::optional<ferry::Sample> s = sub.take(wait_ns);
        TU_CHECK(s.has_value());
        ferry::Loan l2 = pub.loan(200);
        TU_EQ_U64(sub.stats().held, 1);
        TU_EQ_U64(pub.stats().chunks_loaned, 1);
        throw std::runtime_error("unwind");
    } catch (const std::runtime_error &) {
        caught = true;
    }
    TU_CHECK(caught);
    TU_EQ_U64(sub.stats().held, 0);
    chunks_back(pub);

    // A publish that fails leaves the loan with the caller, who may try again.
    ferry::Loan l = pub.loan(64);
    EXPECT_ERROR(pub.publish(std::move(l), 65), FERRY_EINVAL);
    TU_CHECK(l);
    pub.publish(std::move(l));
    TU_CHECK(!l);
    TU_CHECK(sub.take(wait_ns).has_value());
    chunks_back(pub);

    // publish_copy counts its copy; the zero-copy path copies nothing.
    std::array<std::byte, 32> bytes{};
    pub.publish_copy(bytes);
    TU_EQ_U64(pub.stats().bytes_copied, 32);
    TU_CHECK(sub.take(wait_ns).has_value());
    chunks_back(pub);
    TU_EQ_U64(sub.stats().bytes_copied, 0);
}

/* --- moves ------------------------------------------------------------------------------------ */

static void test_moves()
{
    int alive = -1;
    ferry::Node node(test_node("cpp_moves"));
    ferry::Publisher a(node, "/cpp/moves", raw_type);
    ferry::Publisher b(std::move(a));
    TU_CHECK(!a && a.get() == nullptr && b);
    EXPECT_ERROR(a.loan(10), FERRY_EINVAL); // an empty handle refuses, never crashes
    TU_EQ_U64(tu_inspect_count("/cpp/moves", &alive), 1);

    ferry::Publisher c(node, "/cpp/moves", raw_type);
    TU_EQ_U64(tu_inspect_count("/cpp/moves", &alive), 2);
    c = std::move(b); // c's own publisher goes, once
    TU_CHECK(!b && c);
    TU_EQ_U64(tu_inspect_count("/cpp/moves", &alive), 1);

    ferry::Subscriber s1(node, "/cpp/moves", raw_type, ferry::SubscriberOptions().depth(4)), s2;
    TU_CHECK(!s2);
    s2 = std::move(s1);
    TU_CHECK(!s1 && s2);
    tu_connect_local(c.get(), 1, s2.get(), 1);

    // A moved loan is released once, by its last owner.
    ferry::Loan l1 = c.loan(64);
    ferry::Loan l2 = std::move(l1);
    TU_CHECK(!l1 && l2);
    l1.reset(); // nothing
    EXPECT_ERROR(l1.release(), FERRY_ESTATE);
    TU_EQ_U64(c.stats().chunks_loaned, 1);
    l2.release();
    EXPECT_ERROR(l2.release(), FERRY_ESTATE);
    TU_EQ_U64(c.stats().chunks_loaned, 0);
    l1 = c.loan(64);
    l1 = c.loan(64); // the first is given back by the assignment
    TU_EQ_U64(c.stats().chunks_loaned, 1);
    l1.reset();

    // Samples move into a container; a released one cannot be released again.
    for (int i = 0; i < 3; i++)
        c.publish_copy(std::array<std::byte, 8>{});
    std::vector<ferry::Sample> held;
    for (int i = 0; i < 3; i++) {
        std::optional<ferry::Sample> s = s2.take(wait_ns);
        TU_CHECK(s.has_value());
        held.push_back(std::move(*s));
        TU_CHECK(!*s);
    }
    TU_EQ_U64(s2.stats().held, 3);
    held[0].release();
    EXPECT_ERROR(held[0].release(), FERRY_ESTATE);
    held[1] = std::move(held[2]); // releases held[1]'s own sample
    TU_EQ_U64(s2.stats().held, 1);
    held.clear();
    TU_EQ_U64(s2.stats().held, 0);

    // The Node handle may go before its endpoints: they keep the node.
    std::optional<ferry::Node> n2(std::in_place, test_node("cpp_moves2"));
    ferry::Subscriber late(*n2, "/cpp/moves", raw_type);
    ferry::Node n3(std::move(*n2));
    TU_CHECK(!*n2 && n3 && n2->get() == nullptr);
    n2.reset();
    n3 = ferry::Node(test_node("cpp_moves3")); // drops the last Node handle of late's node
    tu_connect_local(c.get(), 2, late.get(), 1);
    c.publish_copy(std::array<std::byte, 8>{});
    TU_CHECK(late.take(wait_ns).has_value());
    TU_CHECK(s2.take(wait_ns).has_value());
    chunks_back(c);
}

/* --- waitsets --------------------------------------------------------------------------------- */

static void test_waitset()
{
    ferry::Node node(test_node("cpp_ws"));
    ferry::Publisher px(node, "/cpp/ws/x", raw_type), py(node, "/cpp/ws/y", raw_type);
    ferry::Subscriber x(node, "/cpp/ws/x", raw_type), y(node, "/cpp/ws/y", raw_type);
    tu_connect_local(px.get(), 1, x.get(), 1);
    tu_connect_local(py.get(), 1, y.get(), 1);
    int cx = 0, cy = 0;
    ferry::WaitSet ws(node);
    ws.add(x, &cx);
    ws.add(y, &cy);
    EXPECT_ERROR(ws.add(x, &cx), FERRY_EBUSY);

    void *ready[2] = {nullptr, nullptr};
    TU_EQ_U64(ws.wait(ready, 10ms), 0); // a timeout is a value
    py.publish_copy(std::array<std::byte, 16>{});
    TU_EQ_U64(ws.wait(ready, wait_ns), 1);
    TU_EQ_PTR(ready[0], &cy);
    TU_CHECK(y.take().has_value());

    // Membership follows a moved subscriber; one destroyed while a member leaves the set.
    ferry::Subscriber y2 = std::move(y);
    py.publish_copy(std::array<std::byte, 16>{});
    TU_EQ_U64(ws.wait(ready, wait_ns), 1);
    TU_EQ_PTR(ready[0], &cy);
    TU_CHECK(y2.take().has_value());
    x = ferry::Subscriber();
    int alive = -1;
    TU_EQ_U64(tu_inspect_count("/cpp/ws/x", &alive), 1); // px alone
    ws.remove(y2);
    EXPECT_ERROR(ws.remove(y2), FERRY_ESTATE);
    ws.add(y2, &cy);

    // A waitset destroyed first leaves its members free to go, or to join another.
    ws = ferry::WaitSet();
    ferry::WaitSet ws2(node);
    ws2.add(y2, &cx);
    chunks_back(py);
}

/* --- errors ----------------------------------------------------------------------------------- */

static void test_errors()
{
    EXPECT_ERROR(ferry::Node(ferry::NodeOptions().dir("")), FERRY_EINVAL);
    EXPECT_ERROR(ferry::Node(test_node("cpp_err").domain(FERRY_DOMAIN_MAX + 1)), FERRY_EINVAL);
    try {
        ferry::Node n(ferry::NodeOptions().dir("/nonexistent-ferry-parent/root"));
        TU_FAIL("a node under a missing directory was created");
    } catch (const ferry::error &e) {
        TU_CHECK_MSG(e.err() == FERRY_ESYS, "got %s", ferry_errname(e.err()));
        TU_EQ_U64(e.sys_errno(), ENOENT);
        TU_CHECK(std::string_view(e.what()).find("ferry_node_create") == 0);
    }

    std::vector<std::string> logged;
    ferry::Node node(test_node("cpp_err").log(
        [&logged](ferry_log_level, const char *m) { logged.emplace_back(m); }, FERRY_LOG_DEBUG));

    EXPECT_ERROR(ferry::Publisher(node, "bad topic!", raw_type), FERRY_ENAME);
    EXPECT_ERROR(ferry::Subscriber(node, "/a//b", raw_type), FERRY_ENAME);
    TU_CHECK(!ferry::topic_valid("bad topic!") && ferry::topic_valid("/cpp/ok"));
    try {
        ferry::Publisher p(node, "bad topic!", raw_type);
    } catch (const std::system_error &e) { // caught as the standard type, too
        TU_CHECK(e.code() == make_error_code(FERRY_ENAME));
        TU_CHECK(e.code().message() == ferry_strerror(FERRY_ENAME));
        TU_CHECK(std::string_view(e.what()).find("ferry_publisher_create") == 0);
    }

    ferry::Publisher typed(node, "/cpp/typed", raw_type);
    EXPECT_ERROR(ferry::Subscriber(node, "/cpp/typed", ferry::Type::named("test/other")),
                 FERRY_ETYPE);
    EXPECT_ERROR(ferry::Publisher(node, "/cpp/typed", ferry::Type{raw_type.name, 1}), FERRY_ETYPE);

    // The pool: one chunk, a blocking loan times out, an erroring one says so.
    auto small = ferry::PublisherOptions().max_chunks(1).pool_bytes(1 << 20).max_sample_size(4096);
    ferry::Publisher blocking(node, "/cpp/block", raw_type,
                              ferry::PublisherOptions(small)
                                  .on_pool_exhausted(FERRY_POOL_BLOCK)
                                  .block_timeout(20ms));
    ferry::Publisher erroring(node, "/cpp/pool", raw_type, small);
    {
        ferry::Loan held = blocking.loan(100), held2 = erroring.loan(100);
        ferry_time t0 = ferry_now();
        EXPECT_ERROR(blocking.loan(100), FERRY_ETIMEDOUT);
        TU_CMP_I64(tu_since(t0), >=, 15 * TU_MS);
        EXPECT_ERROR(erroring.loan(100), FERRY_EPOOL);
        EXPECT_ERROR(erroring.loan(8192), FERRY_ETOOBIG);
    }
    TU_EQ_U64(blocking.stats().chunks_loaned, 0);

    // Expected outcomes are values: nothing queued, nobody there.
    ferry::Subscriber sub(node, "/cpp/pool", raw_type, ferry::SubscriberOptions().max_held(1));
    TU_CHECK(!sub.take().has_value());
    ferry_time t0 = ferry_now();
    TU_CHECK(!sub.take(20ms).has_value());
    TU_CMP_I64(tu_since(t0), >=, 15 * TU_MS);
    TU_CHECK(!sub.wait(1ms));
    TU_CHECK(!sub.wait_publishers(2, 1ms));
    TU_CHECK(!erroring.wait_subscribers(2, 1ms));

    // max_held: the second sample held at once is refused; a sample that is no image is one.
    tu_connect_local(erroring.get(), 1, sub.get(), 1);
    ferry::Publisher more(node, "/cpp/pool", raw_type);
    tu_connect_local(more.get(), 1, sub.get(), 2);
    erroring.publish_copy(std::array<std::byte, 8>{});
    more.publish_copy(std::array<std::byte, 8>{});
    {
        std::optional<ferry::Sample> s = sub.take(wait_ns);
        TU_CHECK(s.has_value());
        TU_CHECK(sub.wait(wait_ns));
        EXPECT_ERROR(sub.take(), FERRY_ELIMIT);
        EXPECT_ERROR(ferry::image_view(*s), FERRY_EPROTO);
        EXPECT_ERROR(ferry::tensor_view(*s), FERRY_EPROTO);
    }
    TU_CHECK(sub.take(wait_ns).has_value());

    ferry::Publisher img(node, "/cpp/img", ferry::image_type);
    ferry::ImageLoan il = img.loan_image(16, 16, "rgb8");
    EXPECT_ERROR(il.frame_id(std::string(FERRY_FRAME_ID_MAX + 1, 'x')), FERRY_EINVAL);
    il.frame_id(std::string(FERRY_FRAME_ID_MAX, 'x'));
    EXPECT_ERROR(img.loan_image(15, 16, "nv12"), FERRY_EINVAL);
    EXPECT_ERROR(img.loan_image(16, 16, "no-such-encoding"), FERRY_EINVAL);
    il.release();
    EXPECT_ERROR(il.release(), FERRY_ESTATE);

    // The node's diagnostics went to the callback, not to stderr.
    TU_CHECK_MSG(!logged.empty(), "the log callback received nothing");
}

/* --- typed loans ------------------------------------------------------------------------------ */

static void test_typed()
{
    ferry::Node node(test_node("cpp_typed"));
    ferry::Publisher pc(node, "/cpp/points", ferry::pointcloud_type);
    ferry::Subscriber pcs(node, "/cpp/points", ferry::pointcloud_type);
    ferry::Publisher tp(node, "/cpp/tensor", ferry::tensor_type);
    ferry::Subscriber ts(node, "/cpp/tensor", ferry::tensor_type);
    tu_connect_local(pc.get(), 1, pcs.get(), 1);
    tu_connect_local(tp.get(), 1, ts.get(), 1);

    const ferry_point_field fields[3] = {{"x", 0, FERRY_POINT_FLOAT32, {}, 1},
                                         {"y", 4, FERRY_POINT_FLOAT32, {}, 1},
                                         {"z", 8, FERRY_POINT_FLOAT32, {}, 1}};
    {
        ferry::PointCloudLoan l = pc.loan_pointcloud(100, 1, fields);
        TU_EQ_U64(l.header().point_step, 12);
        ferry::span<float> xyz = l.as<float>();
        TU_EQ_U64(xyz.size(), 300);
        for (std::size_t i = 0; i < xyz.size(); i++)
            xyz[i] = static_cast<float>(i);
        l.frame_id("lidar").stamp(ferry::stamp_now());
        pc.publish(std::move(l));
        TU_CHECK(!l);
    }
    {
        std::optional<ferry::Sample> s = pcs.take(wait_ns);
        TU_CHECK(s.has_value());
        ferry_pointcloud_view v = ferry::pointcloud_view(*s);
        TU_EQ_U64(v.header.width, 100);
        TU_EQ_U64(v.header.nfields, 3);
        TU_EQ_STR(v.header.frame_id, "lidar");
        TU_CHECK(v.header.stamp.sec > 0);
        const auto *xyz = static_cast<const float *>(v.data);
        TU_CHECK(xyz[299] == 299.0f);
    }

    const int64_t shape[2] = {3, 4};
    {
        ferry::TensorLoan t = tp.loan_tensor(FERRY_DTYPE_FLOAT32, shape);
        ferry::span<float> e = t.as<float>();
        TU_EQ_U64(e.size(), 12);
        for (std::size_t i = 0; i < e.size(); i++)
            e[i] = static_cast<float>(i) / 2;
        tp.publish(std::move(t));
    }
    EXPECT_ERROR(tp.loan_tensor(FERRY_DTYPE_FLOAT32, shape, ferry::span<const int64_t>(shape, 1)),
                 FERRY_EINVAL);
    {
        std::optional<ferry::Sample> s = ts.take(wait_ns);
        TU_CHECK(s.has_value());
        ferry_tensor_view v = ferry::tensor_view(*s);
        TU_EQ_U64(v.numel, 12);
        TU_EQ_U64(v.header.shape[1], 4);
        ferry_dlpack_tensor *dl = ferry::to_dlpack(std::move(*s));
        TU_CHECK(!*s);
        TU_EQ_U64(ts.stats().held, 1); // the export holds it
        TU_CHECK(static_cast<const float *>(dl->dl_tensor.data)[11] == 5.5f);
        dl->deleter(dl);
        TU_EQ_U64(ts.stats().held, 0);
    }
    chunks_back(pc);
    chunks_back(tp);
}

/* --- views ------------------------------------------------------------------------------------ */

static void test_span()
{
    std::vector<int> v{1, 2, 3, 4};
    ferry::span<int> s = v;
    ferry::span<const int> cs = s; // adds const, as std::span does
    TU_EQ_U64(cs.size(), 4);
    TU_EQ_U64(cs.size_bytes(), 4 * sizeof(int));
    TU_EQ_U64(cs[3], 4);
    TU_EQ_U64(s.subspan(1, 2)[0], 2);
    TU_EQ_U64(s.first(3).size(), 3);
    int sum = 0;
    for (int x : cs)
        sum += x;
    TU_EQ_U64(sum, 10);
    const int arr[3] = {7, 8, 9};
    ferry::span<const int> as = arr;
    TU_EQ_U64(as.size(), 3);
    TU_CHECK(ferry::span<int>().empty());
}

int main()
{
    run("test_span", test_span);
    run("test_two_processes", test_two_processes);
    run("test_release_themselves", test_release_themselves);
    run("test_moves", test_moves);
    run("test_waitset", test_waitset);
    run("test_errors", test_errors);
    run("test_typed", test_typed);
    std::printf("cpp_test (C++%ld): all passed\n", __cplusplus / 100 % 100);
    return 0;
}
