/*
 * ferry for C++17: a header-only layer over ferry.h, msg.h and tensor.h. It adds ownership and
 * nothing else: every handle owns one C object and gives it back in its destructor, and every
 * call is the C call of the same name. docs/cpp.md is the tour.
 *
 * Ownership. Node, Publisher, Subscriber and WaitSet are move-only handles. An endpoint (a
 * Publisher, Subscriber or WaitSet) holds a shared reference to its node's C object, so handles
 * may be destroyed in any order: the C node goes with the last of the Node handle and its
 * endpoints. Loan, Sample and the typed loans are move-only too and borrow their endpoint: they
 * must be gone before it is destroyed (debug builds assert it). A moved-from handle is empty:
 * it owns nothing, its destructor does nothing, and its calls throw (FERRY_EINVAL).
 *
 * Errors are exceptions: ferry::error, a std::system_error whose code() is the ferry_err (in
 * ferry::category(), so `e.code() == FERRY_ETYPE` holds) and whose what() names the C call and
 * gives ferry_strerror's message. Outcomes that a caller expects are values, not exceptions:
 * take() returns an empty optional where the C call says FERRY_EAGAIN, and the waits return
 * false where it says FERRY_ETIMEDOUT. Destructors never throw.
 *
 * Concurrency: as the C library. A Node may be used from any thread; a Publisher, a Subscriber
 * with its Samples, a WaitSet with its members, by one thread at a time.
 */
#ifndef FERRY_FERRY_HPP
#define FERRY_FERRY_HPP

#include <ferry/ferry.h>
#include <ferry/msg.h>
#include <ferry/tensor.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#if __cplusplus >= 202002L && defined(__has_include)
#if __has_include(<span>)
#include <span>
#endif
#endif

namespace ferry {

/* --- errors ---------------------------------------------------------------------------------- */

/** The error category of ferry_err codes: name "ferry", messages of ferry_strerror. */
inline const std::error_category &category() noexcept
{
    struct impl final : std::error_category {
        const char *name() const noexcept override { return "ferry"; }
        std::string message(int ev) const override
        {
            return ferry_strerror(static_cast<ferry_err>(ev));
        }
    };
    static const impl c;
    return c;
}

} // namespace ferry

/** Lets a ferry_err become a std::error_code (found by argument-dependent lookup). */
inline std::error_code make_error_code(ferry_err e) noexcept
{
    return {static_cast<int>(e), ferry::category()};
}

namespace std {
template <> struct is_error_code_enum<ferry_err> : true_type {};
} // namespace std

namespace ferry {

/** What every failed call throws: code() is the ferry_err, what() "CALL: MESSAGE". */
class error : public std::system_error {
public:
    /** call names the C function; sys_errno is errno for FERRY_ESYS and FERRY_ENOMEM, else 0. */
    error(ferry_err code, const char *call, int sys_errno = 0)
        : std::system_error(code, describe(call, sys_errno)), sys_errno_(sys_errno)
    {
    }
    /** The code as the C library returned it. */
    ferry_err err() const noexcept { return static_cast<ferry_err>(code().value()); }
    /** errno as the failed call left it, for FERRY_ESYS and FERRY_ENOMEM; 0 otherwise. */
    int sys_errno() const noexcept { return sys_errno_; }

private:
    static std::string describe(const char *call, int sys_errno)
    {
        std::string s = call;
        if (sys_errno != 0)
            s += std::string(" (") + std::strerror(sys_errno) + ")";
        return s;
    }
    int sys_errno_;
};

namespace detail {
[[noreturn]] inline void fail(ferry_err e, const char *call)
{
    int saved = errno; // before anything below can change it
    throw error(e, call, e == FERRY_ESYS || e == FERRY_ENOMEM ? saved : 0);
}
inline void check(ferry_err e, const char *call)
{
    if (e != FERRY_OK)
        fail(e, call);
}
// A wait: FERRY_ETIMEDOUT is the answer false, not a failure.
inline bool waited(ferry_err e, const char *call)
{
    if (e == FERRY_ETIMEDOUT)
        return false;
    check(e, call);
    return true;
}
// A call that fills *out.
template <class T, class H> T out(ferry_err (*fn)(H *, T *), H *handle, const char *call)
{
    T value;
    check(fn(handle, &value), call);
    return value;
}
} // namespace detail

/* --- time ------------------------------------------------------------------------------------ */

/** Timeouts and times: any std::chrono duration of whole nanoseconds or coarser converts. */
using duration = std::chrono::nanoseconds;

/** A timeout that waits for ever (any negative duration does). */
inline constexpr duration forever{FERRY_FOREVER};

/** ferry_now(): CLOCK_MONOTONIC, the clock of Sample::publish_time(). */
inline duration now() noexcept { return duration(ferry_now().ns); }

/** The current system time as a message stamp (what ROS stamps frames with). */
inline ferry_stamp stamp_now() noexcept
{
    auto ns = std::chrono::duration_cast<duration>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    return ferry_stamp{static_cast<int32_t>(ns / 1000000000),
                       static_cast<uint32_t>(ns % 1000000000)};
}

/* --- views ------------------------------------------------------------------------------------ */

#if defined(__cpp_lib_span) && __cpp_lib_span >= 202002L
/** A view of contiguous elements: std::span where the library has it (C++20). */
template <class T> using span = std::span<T>;
#else
/** A view of contiguous elements: the part of C++20's std::span that ferry uses. */
template <class T> class span {
public:
    using element_type = T;                    /**< T */
    using value_type = std::remove_cv_t<T>;    /**< T without const */
    using size_type = std::size_t;             /**< sizes */
    using pointer = T *;                       /**< T * */
    using reference = T &;                     /**< T & */
    using iterator = T *;                      /**< T * */

    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    /** From an array, a std::vector, a std::array, another span: anything with data and size. */
    template <class C, class P = decltype(std::data(std::declval<C &>())),
              class = std::enable_if_t<
                  !std::is_same_v<std::remove_cv_t<std::remove_reference_t<C>>, span> &&
                  std::is_convertible_v<std::remove_pointer_t<P> (*)[], T (*)[]>>>
    constexpr span(C &&c) noexcept : data_(std::data(c)), size_(std::size(c))
    {
    }

    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }
    constexpr span first(std::size_t n) const noexcept { return {data_, n}; }
    constexpr span subspan(std::size_t offset, std::size_t n) const noexcept
    {
        return {data_ + offset, n};
    }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};
#endif

namespace detail {
// Payloads are aligned to payload_align (at least 64), so any T of smaller alignment fits.
template <class T, class B> span<T> view_as(B *data, std::size_t size) noexcept
{
    static_assert(std::is_trivially_copyable_v<std::remove_cv_t<T>>, "payloads hold plain data");
    static_assert(alignof(T) <= 64, "payloads are aligned to 64 bytes");
    return {reinterpret_cast<T *>(data), size / sizeof(T)};
}
} // namespace detail

/* --- types and small functions ------------------------------------------------------------- */

/** A topic's type: its name and hash, which publishers and subscribers of a topic share. */
struct Type {
    std::string name;   /**< the type name ("sensor_msgs/Image") */
    std::uint64_t hash; /**< the type hash */

    /** A type whose hash is ferry_hash of its name. */
    static Type named(std::string name)
    {
        std::uint64_t h = ferry_hash(name.c_str());
        return Type{std::move(name), h};
    }
};

/** Images (msg.h). */
inline const Type image_type{FERRY_IMAGE_TYPE_NAME, FERRY_IMAGE_TYPE_HASH};
/** Point clouds (msg.h). */
inline const Type pointcloud_type{FERRY_POINTCLOUD_TYPE_NAME, FERRY_POINTCLOUD_TYPE_HASH};
/** Tensors (tensor.h). */
inline const Type tensor_type{FERRY_TENSOR_TYPE_NAME, FERRY_TENSOR_TYPE_HASH};

/** ferry_topic_validate: true when topic is a valid topic name. */
inline bool topic_valid(const std::string &topic) noexcept
{
    return ferry_topic_validate(topic.c_str()) == FERRY_OK;
}

/** ferry_clean: removes what dead processes left in a domain; returns the files removed.
 *  dir nullptr is the default root. */
inline std::uint32_t clean(const char *dir, std::uint32_t domain)
{
    std::uint32_t removed = 0;
    detail::check(ferry_clean(dir, domain, &removed), "ferry_clean");
    return removed;
}

/* --- node ------------------------------------------------------------------------------------ */

/** Receives the node's diagnostics (ferry_node_options.log). */
using log_function = std::function<void(ferry_log_level level, const char *message)>;

/** ferry_node_options, filled by ferry_node_options_init; the setters chain. */
class NodeOptions {
public:
    NodeOptions() noexcept { ferry_node_options_init(&o_); }
    /** The root of the domain directories; nullptr for the default. */
    NodeOptions &dir(const char *d)
    {
        dir_ = d ? std::optional<std::string>(d) : std::nullopt;
        return *this;
    }
    /** As dir(const char *). */
    NodeOptions &dir(std::string d)
    {
        dir_ = std::move(d);
        return *this;
    }
    /** 0..FERRY_DOMAIN_MAX. */
    NodeOptions &domain(std::uint32_t d) noexcept { return set(o_.domain, d); }
    /** The node's name, for introspection. */
    NodeOptions &name(std::string n)
    {
        name_ = std::move(n);
        return *this;
    }
    /** Diagnostics of level <= level go to fn instead of stderr. */
    NodeOptions &log(log_function fn, ferry_log_level level = FERRY_LOG_WARN)
    {
        log_ = std::move(fn);
        o_.log_level = level;
        return *this;
    }
    /** Most verbose level. */
    NodeOptions &log_level(ferry_log_level l) noexcept { return set(o_.log_level, l); }
    /** Lets members of group gid connect (share_with_group). */
    NodeOptions &share_with_group(std::uint32_t gid) noexcept
    {
        o_.share_with_group = true;
        o_.share_gid = gid;
        return *this;
    }
    /** The C options, for fields without a setter; dir, name and log are set from the setters. */
    ferry_node_options &raw() noexcept { return o_; }

private:
    template <class F, class V> NodeOptions &set(F &field, V value) noexcept
    {
        field = static_cast<F>(value);
        return *this;
    }
    friend class Node;
    ferry_node_options o_;
    std::optional<std::string> dir_, name_;
    log_function log_;
};

namespace detail {
struct node_state {
    ferry_node *node = nullptr;
    log_function log;
    node_state() = default;
    node_state(const node_state &) = delete;
    node_state &operator=(const node_state &) = delete;
    ~node_state()
    {
        if (!node)
            return;
        // Every endpoint holds a reference, so none of the C++ ones is left.
        [[maybe_unused]] ferry_err e = ferry_node_destroy(node);
        assert(e == FERRY_OK && "a C object made through get() still lives on this node");
    }
    static void log_thunk(void *arg, ferry_log_level level, const char *message) noexcept
    {
        try {
            static_cast<node_state *>(arg)->log(level, message);
        } catch (...) { // no exception may cross the C library
        }
    }
};
} // namespace detail

/** A node (ferry_node_create): the context of the endpoints of one domain. */
class Node {
public:
    /** Creates a node; throws ferry::error as ferry_node_create fails. */
    explicit Node(const NodeOptions &options = NodeOptions())
        : s_(std::make_shared<detail::node_state>())
    {
        ferry_node_options o = options.o_;
        o.dir = options.dir_ ? options.dir_->c_str() : nullptr;
        o.name = options.name_ ? options.name_->c_str() : nullptr;
        if (options.log_) {
            s_->log = options.log_;
            o.log = detail::node_state::log_thunk;
            o.log_arg = s_.get();
        }
        ferry_node *n = nullptr;
        detail::check(ferry_node_create(&n, &o), "ferry_node_create");
        s_->node = n;
    }
    Node(Node &&) noexcept = default;            /**< the other is left empty */
    Node &operator=(Node &&) noexcept = default; /**< drops this node's reference first */
    Node(const Node &) = delete;
    Node &operator=(const Node &) = delete;

    /** The domain directory ("/dev/shm/ferry-1000/0"); nullptr when empty. */
    const char *dir() const noexcept { return s_ ? ferry_node_dir(s_->node) : nullptr; }
    /** The C node, for the C API (sync.h, exec.h, lifecycle.h); nullptr when empty. What is
     *  created on it through C must be destroyed through C before the last handle goes. */
    ferry_node *get() const noexcept { return s_ ? s_->node : nullptr; }
    /** False when moved from. */
    explicit operator bool() const noexcept { return s_ != nullptr; }

private:
    friend class Publisher;
    friend class Subscriber;
    friend class WaitSet;
    std::shared_ptr<detail::node_state> s_;
};

/* --- publisher ------------------------------------------------------------------------------ */

/** ferry_publisher_options, filled by ferry_publisher_options_init; the setters chain. */
class PublisherOptions {
public:
    PublisherOptions() noexcept { ferry_publisher_options_init(&o_); }
    /** Largest loan. */
    PublisherOptions &max_sample_size(std::size_t v) noexcept { return set(o_.max_sample_size, v); }
    /** Byte cap. */
    PublisherOptions &pool_bytes(std::size_t v) noexcept { return set(o_.pool_bytes, v); }
    /** Chunk cap. */
    PublisherOptions &max_chunks(std::uint32_t v) noexcept { return set(o_.max_chunks, v); }
    /** At once. */
    PublisherOptions &max_subscribers(std::uint32_t v) noexcept
    {
        return set(o_.max_subscribers, v);
    }
    /** Kept for late joiners. */
    PublisherOptions &history(std::uint32_t v) noexcept { return set(o_.history, v); }
    /** 64..4096. */
    PublisherOptions &payload_align(std::size_t v) noexcept { return set(o_.payload_align, v); }
    /** Error or block. */
    PublisherOptions &on_pool_exhausted(ferry_pool_policy v) noexcept
    {
        return set(o_.on_pool_exhausted, v);
    }
    /** How long a blocked loan or publish waits. */
    PublisherOptions &block_timeout(duration v) noexcept
    {
        return set(o_.block_timeout_ns, v.count());
    }
    /** Spin budget before a wait sleeps; duration(FERRY_SPIN_OFF) never spins. */
    PublisherOptions &spin(duration v) noexcept { return set(o_.spin_ns, v.count()); }
    /** FERRY_OVERFLOW_BLOCK subscribers. */
    PublisherOptions &admit_blocking(bool v = true) noexcept { return set(o_.admit_blocking, v); }
    /** Per-subscriber cap. */
    PublisherOptions &max_chunks_per_subscriber(std::uint32_t v) noexcept
    {
        return set(o_.max_chunks_per_subscriber, v);
    }
    /** Per-subscriber cap. */
    PublisherOptions &max_bytes_per_subscriber(std::size_t v) noexcept
    {
        return set(o_.max_bytes_per_subscriber, v);
    }
    /** Connections before hello. */
    PublisherOptions &max_pending(std::uint32_t v) noexcept { return set(o_.max_pending, v); }
    /** The segment's pages. */
    PublisherOptions &huge_pages(ferry_huge_pages v) noexcept { return set(o_.huge_pages, v); }
    ferry_publisher_options &raw() noexcept { return o_; } /**< the C options */
    const ferry_publisher_options &raw() const noexcept { return o_; } /**< the C options */

private:
    template <class F, class V> PublisherOptions &set(F &field, V value) noexcept
    {
        field = static_cast<F>(value);
        return *this;
    }
    ferry_publisher_options o_;
};

class Publisher;

/** A writable payload on loan (ferry_loan). Published with Publisher::publish; given back with
 *  ferry_loan_release by release() or by the destructor when it was not published. */
class Loan {
public:
    Loan() noexcept = default; /**< empty */
    Loan(Loan &&o) noexcept
        : pub_(std::exchange(o.pub_, nullptr)), data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0))
    {
    }
    Loan &operator=(Loan &&o) noexcept /**< gives this loan back first */
    {
        if (this != &o) {
            reset();
            pub_ = std::exchange(o.pub_, nullptr);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    Loan(const Loan &) = delete;
    Loan &operator=(const Loan &) = delete;
    ~Loan() { reset(); }

    void *data() const noexcept { return data_; }      /**< the payload; nullptr when empty */
    std::size_t size() const noexcept { return size_; } /**< bytes loaned */
    /** The payload as bytes. */
    span<std::byte> bytes() const noexcept { return {static_cast<std::byte *>(data_), size_}; }
    /** The payload as elements of a plain type T (size() / sizeof(T) of them). */
    template <class T> span<T> as() const noexcept { return detail::view_as<T>(data_, size_); }
    /** Gives the loan back now (ferry_loan_release); throws on an error (FERRY_ESTATE when
     *  empty). */
    void release()
    {
        if (!data_)
            throw error(FERRY_ESTATE, "ferry_loan_release");
        detail::check(ferry_loan_release(pub_, data_), "ferry_loan_release");
        pub_ = nullptr;
        data_ = nullptr;
        size_ = 0;
    }
    /** As release(), ignoring errors; nothing when empty. */
    void reset() noexcept
    {
        if (data_)
            ferry_loan_release(pub_, data_);
        pub_ = nullptr;
        data_ = nullptr;
        size_ = 0;
    }
    /** True while it holds a loan. */
    explicit operator bool() const noexcept { return data_ != nullptr; }

private:
    friend class Publisher;
    Loan(ferry_publisher *pub, void *data, std::size_t size) noexcept
        : pub_(pub), data_(data), size_(size)
    {
    }
    ferry_publisher *pub_ = nullptr;
    void *data_ = nullptr;
    std::size_t size_ = 0;
};

namespace detail {
template <class M> struct msg_ops;
template <> struct msg_ops<ferry_image> {
    static constexpr auto publish = ferry_image_publish;
    static constexpr auto release = ferry_image_loan_release;
    static constexpr const char *publish_name = "ferry_image_publish";
    static constexpr const char *release_name = "ferry_image_loan_release";
};
template <> struct msg_ops<ferry_pointcloud> {
    static constexpr auto publish = ferry_pointcloud_publish;
    static constexpr auto release = ferry_pointcloud_loan_release;
    static constexpr const char *publish_name = "ferry_pointcloud_publish";
    static constexpr const char *release_name = "ferry_pointcloud_loan_release";
};
template <> struct msg_ops<ferry_tensor> {
    static constexpr auto publish = ferry_tensor_publish;
    static constexpr auto release = ferry_tensor_loan_release;
    static constexpr const char *publish_name = "ferry_tensor_publish";
    static constexpr const char *release_name = "ferry_tensor_loan_release";
};
} // namespace detail

/** A typed loan of msg.h or tensor.h (M is ferry_image, ferry_pointcloud or ferry_tensor): its
 *  header is filled, its data is the caller's to write. Published with Publisher::publish,
 *  given back by release() or the destructor as Loan is. */
template <class M> class MsgLoan {
public:
    /** ferry_image_header, ferry_pointcloud_header or ferry_tensor_header. */
    using header_type = std::remove_pointer_t<decltype(M::header)>;

    MsgLoan() noexcept = default; /**< empty */
    MsgLoan(MsgLoan &&o) noexcept
        : pub_(std::exchange(o.pub_, nullptr)), m_(std::exchange(o.m_, M{}))
    {
    }
    MsgLoan &operator=(MsgLoan &&o) noexcept /**< gives this loan back first */
    {
        if (this != &o) {
            reset();
            pub_ = std::exchange(o.pub_, nullptr);
            m_ = std::exchange(o.m_, M{});
        }
        return *this;
    }
    MsgLoan(const MsgLoan &) = delete;
    MsgLoan &operator=(const MsgLoan &) = delete;
    ~MsgLoan() { reset(); }

    /** The header in the sample: set stamp and frame_id (and what msg.h says) only. */
    header_type &header() const noexcept { return *m_.header; }
    /** The pixels, points or elements, writable. */
    span<std::byte> data() const noexcept
    {
        return {static_cast<std::byte *>(m_.data), m_.data_size};
    }
    /** The data as elements of a plain type T. */
    template <class T> span<T> as() const noexcept
    {
        return detail::view_as<T>(m_.data, m_.data_size);
    }
    /** Sets the header's stamp. */
    MsgLoan &stamp(ferry_stamp s) noexcept { m_.header->stamp = s; return *this; }
    /** Sets the header's frame_id; FERRY_EINVAL when longer than FERRY_FRAME_ID_MAX bytes. */
    MsgLoan &frame_id(std::string_view id)
    {
        if (id.size() > FERRY_FRAME_ID_MAX)
            throw error(FERRY_EINVAL, "frame_id");
        std::memcpy(m_.header->frame_id, id.data(), id.size());
        m_.header->frame_id[id.size()] = '\0';
        return *this;
    }
    /** The C loan. */
    const M &get() const noexcept { return m_; }
    /** Gives the loan back now; throws on an error, FERRY_ESTATE when empty. */
    void release()
    {
        if (!m_.payload)
            throw error(FERRY_ESTATE, detail::msg_ops<M>::release_name);
        detail::check(detail::msg_ops<M>::release(pub_, &m_), detail::msg_ops<M>::release_name);
        pub_ = nullptr;
    }
    /** As release(), ignoring errors. */
    void reset() noexcept
    {
        if (m_.payload)
            detail::msg_ops<M>::release(pub_, &m_);
        pub_ = nullptr;
        m_ = M{};
    }
    /** True while it holds a loan. */
    explicit operator bool() const noexcept { return m_.payload != nullptr; }

private:
    friend class Publisher;
    ferry_publisher *pub_ = nullptr;
    M m_{};
};

using ImageLoan = MsgLoan<ferry_image>;           /**< an image on loan */
using PointCloudLoan = MsgLoan<ferry_pointcloud>; /**< a point cloud on loan */
using TensorLoan = MsgLoan<ferry_tensor>;         /**< a host tensor on loan */

namespace detail {
struct pub_state {
    ferry_publisher *pub = nullptr;
    std::shared_ptr<node_state> node; // released after the publisher: see ~pub_state
    pub_state() = default;
    pub_state(const pub_state &) = delete;
    pub_state &operator=(const pub_state &) = delete;
    ~pub_state()
    {
        if (!pub)
            return;
#ifndef NDEBUG
        ferry_publisher_stats st;
        if (ferry_publisher_stats_get(pub, &st) == FERRY_OK)
            assert(st.chunks_loaned == 0 && "a Loan outlives its Publisher");
#endif
        ferry_publisher_destroy(pub);
    }
};
} // namespace detail

/** A publisher (ferry_publisher_create) on one topic. */
class Publisher {
public:
    Publisher() noexcept = default; /**< empty */
    /** Creates a publisher; throws ferry::error as ferry_publisher_create fails. */
    Publisher(const Node &node, const std::string &topic, const Type &type,
              const PublisherOptions &options = PublisherOptions())
        : s_(std::make_unique<detail::pub_state>())
    {
        ferry_publisher *p = nullptr;
        detail::check(ferry_publisher_create(&p, node.get(), topic.c_str(), type.name.c_str(),
                                             type.hash, &options.raw()),
                      "ferry_publisher_create");
        s_->pub = p;
        s_->node = node.s_;
    }

    /** Loans size bytes (ferry_loan). */
    Loan loan(std::size_t size)
    {
        void *p = nullptr;
        detail::check(ferry_loan(get(), size, &p), "ferry_loan");
        return Loan(get(), p, size);
    }
    /** Publishes a loan (ferry_publish) of size bytes, 0 for all it loaned. On success the loan
     *  is left empty; when it throws the loan is untouched, still the caller's. */
    void publish(Loan &&loan, std::size_t size = 0)
    {
        detail::check(ferry_publish(get(), loan.data_, size), "ferry_publish");
        loan.pub_ = nullptr;
        loan.data_ = nullptr;
        loan.size_ = 0;
    }
    /** Loans an image of width x height pixels of encoding (ferry_image_loan). */
    ImageLoan loan_image(std::uint32_t width, std::uint32_t height, const char *encoding,
                         std::uint32_t step = 0)
    {
        ImageLoan l;
        detail::check(ferry_image_loan(get(), width, height, encoding, step, &l.m_),
                      "ferry_image_loan");
        l.pub_ = get();
        return l;
    }
    /** Loans a point cloud (ferry_pointcloud_loan); point_step 0 packs the fields. */
    PointCloudLoan loan_pointcloud(std::uint32_t width, std::uint32_t height,
                                   span<const ferry_point_field> fields,
                                   std::uint32_t point_step = 0)
    {
        PointCloudLoan l;
        auto n = static_cast<std::uint32_t>(fields.size());
        detail::check(ferry_pointcloud_loan(get(), width, height, fields.data(), n, point_step,
                                            &l.m_),
                      "ferry_pointcloud_loan");
        l.pub_ = get();
        return l;
    }
    /** Loans a host tensor (ferry_tensor_loan); empty strides are C-contiguous. */
    TensorLoan loan_tensor(ferry_dtype dtype, span<const std::int64_t> shape,
                           span<const std::int64_t> strides = {})
    {
        if (!strides.empty() && strides.size() != shape.size())
            throw error(FERRY_EINVAL, "ferry_tensor_loan");
        TensorLoan l;
        auto ndim = static_cast<std::uint32_t>(shape.size());
        detail::check(ferry_tensor_loan(get(), dtype, ndim, shape.data(),
                                        strides.empty() ? nullptr : strides.data(), &l.m_),
                      "ferry_tensor_loan");
        l.pub_ = get();
        return l;
    }
    /** Publishes a typed loan (ferry_image_publish, ...); ownership as publish(Loan &&). */
    template <class M> void publish(MsgLoan<M> &&loan)
    {
        using ops = detail::msg_ops<M>;
        detail::check(ops::publish(get(), &loan.m_), ops::publish_name);
        loan.pub_ = nullptr;
        loan.m_ = M{};
    }
    /** Copies bytes into a loan and publishes it (ferry_publish_copy). */
    void publish_copy(span<const std::byte> bytes)
    {
        detail::check(ferry_publish_copy(get(), bytes.data(), bytes.size()), "ferry_publish_copy");
    }
    /** Carves and touches count chunks for loans of up to size bytes (ferry_publisher_reserve). */
    void reserve(std::size_t size, std::uint32_t count)
    {
        detail::check(ferry_publisher_reserve(get(), size, count), "ferry_publisher_reserve");
    }
    /** Runs housekeeping, waiting up to timeout for something to do (ferry_publisher_poll). */
    void poll(duration timeout = duration(0))
    {
        detail::check(ferry_publisher_poll(get(), timeout.count()), "ferry_publisher_poll");
    }
    /** Waits until count subscribers are connected; false when the timeout passed first. */
    [[nodiscard]] bool wait_subscribers(std::uint32_t count, duration timeout)
    {
        return detail::waited(ferry_publisher_wait_subscribers(get(), count, timeout.count()),
                              "ferry_publisher_wait_subscribers");
    }
    /** The descriptor to poll for housekeeping (ferry_publisher_fd); owned by the publisher. */
    int fd() const { return detail::out(ferry_publisher_fd, get(), "ferry_publisher_fd"); }
    /** The counters (ferry_publisher_stats_get). */
    ferry_publisher_stats stats() const
    {
        return detail::out(ferry_publisher_stats_get, get(), "ferry_publisher_stats_get");
    }
    /** The C publisher, for the C API; nullptr when empty. */
    ferry_publisher *get() const noexcept { return s_ ? s_->pub : nullptr; }
    /** False when empty. */
    explicit operator bool() const noexcept { return s_ != nullptr; }

private:
    std::unique_ptr<detail::pub_state> s_;
};

/* --- subscriber ----------------------------------------------------------------------------- */

/** ferry_subscriber_options, filled by ferry_subscriber_options_init; the setters chain. */
class SubscriberOptions {
public:
    SubscriberOptions() noexcept { ferry_subscriber_options_init(&o_); }
    /** Queue per publisher. */
    SubscriberOptions &depth(std::uint32_t v) noexcept { return set(o_.depth, v); }
    /** Drop oldest or block. */
    SubscriberOptions &overflow(ferry_overflow v) noexcept { return set(o_.overflow, v); }
    /** Asked on joining. */
    SubscriberOptions &history(std::uint32_t v) noexcept { return set(o_.history, v); }
    /** Samples held at once. */
    SubscriberOptions &max_held(std::uint32_t v) noexcept { return set(o_.max_held, v); }
    /** At once. */
    SubscriberOptions &max_publishers(std::uint32_t v) noexcept
    {
        return set(o_.max_publishers, v);
    }
    /** Populate chunks on first take. */
    SubscriberOptions &prefault(bool v = true) noexcept { return set(o_.prefault, v); }
    /** Spin budget before a wait sleeps; duration(FERRY_SPIN_OFF) never spins. */
    SubscriberOptions &spin(duration v) noexcept { return set(o_.spin_ns, v.count()); }
    /** Never sleep. */
    SubscriberOptions &busy_poll(bool v = true) noexcept { return set(o_.busy_poll, v); }
    /** Served after the other subscribers (recorders, viewers, loggers). */
    SubscriberOptions &background(bool v = true) noexcept { return set(o_.background, v); }
    ferry_subscriber_options &raw() noexcept { return o_; } /**< the C options */
    const ferry_subscriber_options &raw() const noexcept { return o_; } /**< the C options */

private:
    template <class F, class V> SubscriberOptions &set(F &field, V value) noexcept
    {
        field = static_cast<F>(value);
        return *this;
    }
    ferry_subscriber_options o_;
};

/** A taken sample (ferry_take): a read-only view of the publisher's memory, released with
 *  ferry_release by release() or by the destructor. */
class Sample {
public:
    Sample() noexcept = default; /**< empty */
    Sample(Sample &&o) noexcept
        : sub_(std::exchange(o.sub_, nullptr)), s_(std::exchange(o.s_, ferry_sample{}))
    {
    }
    Sample &operator=(Sample &&o) noexcept /**< releases this sample first */
    {
        if (this != &o) {
            reset();
            sub_ = std::exchange(o.sub_, nullptr);
            s_ = std::exchange(o.s_, ferry_sample{});
        }
        return *this;
    }
    Sample(const Sample &) = delete;
    Sample &operator=(const Sample &) = delete;
    ~Sample() { reset(); }

    const void *data() const noexcept { return s_.data; }  /**< the payload, read-only */
    std::size_t size() const noexcept { return s_.size; } /**< payload bytes */
    /** The payload as bytes. */
    span<const std::byte> bytes() const noexcept
    {
        return {static_cast<const std::byte *>(s_.data), s_.size};
    }
    /** The payload as elements of a plain type T. */
    template <class T> span<const T> as() const noexcept
    {
        return detail::view_as<const T>(s_.data, s_.size);
    }
    /** The publisher's count: 1 for its first sample. */
    std::uint64_t sequence() const noexcept { return s_.sequence; }
    /** The publisher, as ferry_publisher_stats.id. */
    std::uint64_t publisher_id() const noexcept { return s_.publisher_id; }
    /** When it was published, on the clock of ferry::now(). */
    duration publish_time() const noexcept { return duration(s_.publish_time.ns); }
    /** The C sample, for the view functions of msg.h and tensor.h. */
    const ferry_sample &raw() const noexcept { return s_; }
    /** Releases the sample now (ferry_release); throws on an error, FERRY_ESTATE when empty. */
    void release()
    {
        if (!sub_)
            throw error(FERRY_ESTATE, "ferry_release");
        detail::check(ferry_release(sub_, &s_), "ferry_release");
        sub_ = nullptr;
        s_ = ferry_sample{};
    }
    /** As release(), ignoring errors; nothing when empty. */
    void reset() noexcept
    {
        if (sub_)
            ferry_release(sub_, &s_);
        sub_ = nullptr;
        s_ = ferry_sample{};
    }
    /** True while it holds a sample. */
    explicit operator bool() const noexcept { return sub_ != nullptr; }

private:
    friend class Subscriber;
    friend ferry_dlpack_tensor *to_dlpack(Sample &&s);
    ferry_subscriber *sub_ = nullptr;
    ferry_sample s_{};
};

/** Validates a sample as an image (ferry_image_view_get); valid while the sample is held. */
inline ferry_image_view image_view(const Sample &s)
{
    return detail::out(ferry_image_view_get, &s.raw(), "ferry_image_view_get");
}
/** Validates a sample as a point cloud (ferry_pointcloud_view_get). */
inline ferry_pointcloud_view pointcloud_view(const Sample &s)
{
    return detail::out(ferry_pointcloud_view_get, &s.raw(), "ferry_pointcloud_view_get");
}
/** Validates a sample as a host tensor (ferry_tensor_view_get). */
inline ferry_tensor_view tensor_view(const Sample &s)
{
    return detail::out(ferry_tensor_view_get, &s.raw(), "ferry_tensor_view_get");
}
/** Exports a host tensor as DLPack (ferry_tensor_to_dlpack). The export owns the sample, which
 *  is left empty; its deleter releases it. When it throws the sample is untouched. */
inline ferry_dlpack_tensor *to_dlpack(Sample &&s)
{
    ferry_dlpack_tensor *t = nullptr;
    detail::check(ferry_tensor_to_dlpack(s.sub_, &s.s_, &t), "ferry_tensor_to_dlpack");
    s.sub_ = nullptr;
    s.s_ = ferry_sample{};
    return t;
}

namespace detail {
struct ws_state;
struct sub_state {
    ferry_subscriber *sub = nullptr;
    std::shared_ptr<node_state> node;
    ws_state *ws = nullptr; // the WaitSet it is in
    sub_state() = default;
    sub_state(const sub_state &) = delete;
    sub_state &operator=(const sub_state &) = delete;
    inline ~sub_state();
};
struct ws_state {
    ferry_waitset *ws = nullptr;
    std::shared_ptr<node_state> node;
    std::vector<sub_state *> members;
    ws_state() = default;
    ws_state(const ws_state &) = delete;
    ws_state &operator=(const ws_state &) = delete;
    void forget(sub_state *s) noexcept
    {
        members.erase(std::remove(members.begin(), members.end(), s), members.end());
    }
    ~ws_state()
    {
        if (!ws)
            return;
        for (sub_state *s : members)
            s->ws = nullptr;
        ferry_waitset_destroy(ws); // clears the C subscribers' membership too
    }
};
sub_state::~sub_state()
{
    if (!sub)
        return;
    if (ws) { // ferry_subscriber_destroy refuses a member
        ferry_waitset_remove(ws->ws, sub);
        ws->forget(this);
    }
    [[maybe_unused]] ferry_err e = ferry_subscriber_destroy(sub);
    assert(e == FERRY_OK && "a Sample outlives its Subscriber");
}
} // namespace detail

/** A subscriber (ferry_subscriber_create) of one topic. */
class Subscriber {
public:
    Subscriber() noexcept = default; /**< empty */
    /** Creates a subscriber; throws ferry::error as ferry_subscriber_create fails. */
    Subscriber(const Node &node, const std::string &topic, const Type &type,
               const SubscriberOptions &options = SubscriberOptions())
        : s_(std::make_unique<detail::sub_state>())
    {
        ferry_subscriber *p = nullptr;
        detail::check(ferry_subscriber_create(&p, node.get(), topic.c_str(), type.name.c_str(),
                                              type.hash, &options.raw()),
                      "ferry_subscriber_create");
        s_->sub = p;
        s_->node = node.s_;
    }

    /** Takes the oldest queued sample (ferry_take); empty when none is queued (FERRY_EAGAIN). */
    std::optional<Sample> take()
    {
        Sample s;
        ferry_err e = ferry_take(get(), &s.s_);
        if (e == FERRY_EAGAIN)
            return std::nullopt;
        detail::check(e, "ferry_take");
        s.sub_ = get();
        return std::optional<Sample>(std::move(s));
    }
    /** Waits up to timeout for a sample and takes it; empty when none came. */
    std::optional<Sample> take(duration timeout)
    {
        const bool endless = timeout.count() < 0;
        const duration deadline = now() + timeout;
        for (;;) {
            if (std::optional<Sample> s = take())
                return s;
            duration left = endless ? timeout : std::max(deadline - now(), duration(0));
            if (!wait(left))
                return std::nullopt;
        }
    }
    /** Waits until a sample is queued (ferry_wait); false when the timeout passed first. */
    [[nodiscard]] bool wait(duration timeout)
    {
        return detail::waited(ferry_wait(get(), timeout.count()), "ferry_wait");
    }
    /** Waits until count publishers are connected; false when the timeout passed first. */
    [[nodiscard]] bool wait_publishers(std::uint32_t count, duration timeout)
    {
        return detail::waited(ferry_subscriber_wait_publishers(get(), count, timeout.count()),
                              "ferry_subscriber_wait_publishers");
    }
    /** The descriptor to poll for samples (ferry_subscriber_fd); owned by the subscriber. */
    int fd() const { return detail::out(ferry_subscriber_fd, get(), "ferry_subscriber_fd"); }
    /** The counters (ferry_subscriber_stats_get). */
    ferry_subscriber_stats stats() const
    {
        return detail::out(ferry_subscriber_stats_get, get(), "ferry_subscriber_stats_get");
    }
    /** The C subscriber, for the C API; nullptr when empty. */
    ferry_subscriber *get() const noexcept { return s_ ? s_->sub : nullptr; }
    /** False when empty. */
    explicit operator bool() const noexcept { return s_ != nullptr; }

private:
    friend class WaitSet;
    std::unique_ptr<detail::sub_state> s_;
};

/* --- waitset ------------------------------------------------------------------------------- */

/** A waitset (ferry_waitset_create). A Subscriber destroyed while a member leaves it first; a
 *  WaitSet destroyed first leaves its members free. */
class WaitSet {
public:
    WaitSet() noexcept = default; /**< empty */
    /** Creates an empty waitset on node. */
    explicit WaitSet(const Node &node) : s_(std::make_unique<detail::ws_state>())
    {
        ferry_waitset *w = nullptr;
        detail::check(ferry_waitset_create(&w, node.get()), "ferry_waitset_create");
        s_->ws = w;
        s_->node = node.s_;
    }
    /** Adds sub; wait() reports it by context (ferry_waitset_add). */
    void add(Subscriber &sub, void *context)
    {
        if (!s_ || !sub.s_)
            throw error(FERRY_EINVAL, "ferry_waitset_add");
        s_->members.reserve(s_->members.size() + 1); // so that the push below cannot throw
        detail::check(ferry_waitset_add(s_->ws, sub.get(), context), "ferry_waitset_add");
        s_->members.push_back(sub.s_.get());
        sub.s_->ws = s_.get();
    }
    /** Removes sub (ferry_waitset_remove). */
    void remove(Subscriber &sub)
    {
        detail::check(ferry_waitset_remove(get(), sub.get()), "ferry_waitset_remove");
        s_->forget(sub.s_.get());
        sub.s_->ws = nullptr;
    }
    /** Waits until a member has a sample; writes the contexts of up to ready.size() such
     *  members to ready and returns their number, 0 when the timeout passed first. */
    std::size_t wait(span<void *> ready, duration timeout)
    {
        std::size_t n = 0;
        ferry_err e = ferry_waitset_wait(get(), timeout.count(), ready.data(), ready.size(), &n);
        return detail::waited(e, "ferry_waitset_wait") ? n : 0;
    }
    /** The C waitset; nullptr when empty. */
    ferry_waitset *get() const noexcept { return s_ ? s_->ws : nullptr; }
    /** False when empty. */
    explicit operator bool() const noexcept { return s_ != nullptr; }

private:
    std::unique_ptr<detail::ws_state> s_;
};

} // namespace ferry

#endif // FERRY_FERRY_HPP
