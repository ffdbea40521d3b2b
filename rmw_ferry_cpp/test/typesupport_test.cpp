// rmw_ferry's message types against rmw_cyclonedds_cpp, a serialiser ferry did not write: for
// every test_msgs message and a set of common ROS 2 messages, in the C and the C++ type support,
// with random contents: the bytes written equal rmw_cyclonedds_cpp's rmw_serialize, what is
// parsed from its bytes (little- and big-endian) equals the original, C and C++ read each
// other's bytes, no truncated or corrupted buffer is accepted wrongly or makes the parser
// allocate more than the buffer could describe, and hashes, plainness and definitions are right.
// Also measures (prints, does not assert) the time to serialise and parse a 1080p rgb8 image.
#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TS_TEST_ASAN 1
#endif
#ifdef TS_TEST_ASAN
#include <sanitizer/allocator_interface.h>
#endif

#include "rcutils/allocator.h"
#include "rcutils/error_handling.h"
#include "rcutils/types/uint8_array.h"
#include "rmw/ret_types.h"
#include "rmw/serialized_message.h"
#include "rosidl_runtime_c/primitives_sequence_functions.h"
#include "rosidl_runtime_c/string_functions.h"
#include "rosidl_runtime_c/u16string_functions.h"
#include "rosidl_typesupport_cpp/message_type_support.hpp"
#include "rosidl_typesupport_cpp/service_type_support.hpp"
#include "rosidl_typesupport_introspection_c/field_types.h"
#include "rosidl_typesupport_introspection_c/identifier.h"
#include "rosidl_typesupport_introspection_c/message_introspection.h"
#include "rosidl_typesupport_introspection_cpp/identifier.hpp"
#include "rosidl_typesupport_introspection_cpp/message_introspection.hpp"

#include "builtin_interfaces/msg/time.h"
#include "builtin_interfaces/msg/time.hpp"
#include "geometry_msgs/msg/pose.h"
#include "geometry_msgs/msg/pose.hpp"
#include "geometry_msgs/msg/pose_array.h"
#include "geometry_msgs/msg/pose_array.hpp"
#include "geometry_msgs/msg/twist.h"
#include "geometry_msgs/msg/twist.hpp"
#include "rcl_interfaces/msg/log.h"
#include "rcl_interfaces/msg/log.hpp"
#include "rcl_interfaces/msg/parameter_event.h"
#include "rcl_interfaces/msg/parameter_event.hpp"
#include "sensor_msgs/msg/camera_info.h"
#include "sensor_msgs/msg/camera_info.hpp"
#include "sensor_msgs/msg/image.h"
#include "sensor_msgs/msg/image.hpp"
#include "sensor_msgs/msg/imu.h"
#include "sensor_msgs/msg/imu.hpp"
#include "sensor_msgs/msg/point_cloud2.h"
#include "sensor_msgs/msg/point_cloud2.hpp"
#include "std_msgs/msg/string.h"
#include "std_msgs/msg/string.hpp"
#include "test_msgs/msg/arrays.h"
#include "test_msgs/msg/basic_types.h"
#include "test_msgs/msg/bounded_plain_sequences.h"
#include "test_msgs/msg/bounded_sequences.h"
#include "test_msgs/msg/builtins.h"
#include "test_msgs/msg/constants.h"
#include "test_msgs/msg/defaults.h"
#include "test_msgs/msg/empty.h"
#include "test_msgs/msg/multi_nested.h"
#include "test_msgs/msg/nested.h"
#include "test_msgs/msg/strings.h"
#include "test_msgs/msg/unbounded_sequences.h"
#include "test_msgs/msg/w_strings.h"
#include "test_msgs/msg/w_strings.hpp"
#include "test_msgs/srv/arrays.h"
#include "test_msgs/srv/arrays.hpp"
#include "test_msgs/srv/basic_types.h"
#include "test_msgs/srv/basic_types.hpp"
#include "test_msgs/message_fixtures.hpp"

extern "C" {
#include "ros2.h"
}

#include "typesupport.hpp"

namespace
{

namespace ts = rmw_ferry;
namespace tic = rosidl_typesupport_introspection_cpp;

int failures = 0;

#define CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      failures++; \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__); \
      std::fprintf(stderr, "\n"); \
      if (failures > 50) { \
        std::fprintf(stderr, "too many failures\n"); \
        std::exit(1); \
      } \
    } \
  } while (0)

struct Counts
{
  size_t types = 0;
  size_t messages = 0;     // serialisations compared with rmw_cyclonedds_cpp
  size_t bytes = 0;        // bytes compared with rmw_cyclonedds_cpp
  size_t truncations = 0;
  size_t mutations = 0;
  size_t mutations_accepted = 0;
} counts;

using Bytes = std::vector<uint8_t>;

// rmw_cyclonedds_cpp's rmw_serialize, loaded privately so that no rmw_* of ours can shadow it.
struct Cyclone
{
  using SerializeFn = rmw_ret_t (*)(
    const void *, const rosidl_message_type_support_t *, rmw_serialized_message_t *);
  SerializeFn serialize = nullptr;

  bool load()
  {
    void * lib = dlopen("librmw_cyclonedds_cpp.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::printf("typesupport_test: SKIP: cannot load librmw_cyclonedds_cpp.so: %s\n", dlerror());
      return false;
    }
    serialize = reinterpret_cast<SerializeFn>(dlsym(lib, "rmw_serialize"));
    return serialize != nullptr;
  }

  Bytes run(const void * msg, const rosidl_message_type_support_t * h) const
  {
    rcutils_uint8_array_t a = rcutils_get_zero_initialized_uint8_array();
    rcutils_allocator_t al = rcutils_get_default_allocator();
    if (rcutils_uint8_array_init(&a, 0, &al) != RCUTILS_RET_OK) {
      std::abort();
    }
    rmw_ret_t r = serialize(msg, h, &a);
    CHECK(r == RMW_RET_OK, "rmw_cyclonedds_cpp's rmw_serialize: %s", rcutils_get_error_string().str);
    Bytes out(a.buffer, a.buffer + a.buffer_length);
    if (rcutils_uint8_array_fini(&a) != RCUTILS_RET_OK) {
      std::abort();
    }
    rcutils_reset_error();
    return out;
  }
} cyclone;

size_t heap_in_use()
{
#ifdef TS_TEST_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

// ---- a message in memory, built and torn down through our description ----

struct Msg
{
  const ts::MessageType * t;
  void * p;
  explicit Msg(const ts::MessageType * type)
  : t(type), p(std::aligned_alloc(16, (ts::message_size(type) + 15) / 16 * 16))
  {
    ts::message_init(t, p);
  }
  ~Msg()
  {
    ts::message_fini(t, p);
    std::free(p);
  }
  Msg(const Msg &) = delete;
  Msg & operator=(const Msg &) = delete;
};

Bytes write(const ts::MessageType * t, const void * msg)
{
  Bytes b(ts::cdr_size(t, msg));
  ts::cdr_write(t, msg, b.data(), b.size());
  return b;
}

std::string first_difference(const Bytes & a, const Bytes & b)
{
  size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) {
    i++;
  }
  char s[160];
  if (i == n) {
    std::snprintf(s, sizeof s, "sizes %zu and %zu, same bytes up to the shorter", a.size(),
      b.size());
  } else {
    std::snprintf(s, sizeof s, "sizes %zu and %zu, first difference at byte %zu: %02x != %02x",
      a.size(), b.size(), i, a[i], b[i]);
  }
  return s;
}

// ---- random contents, filled through the introspection alone (not through rmw_ferry) ----

struct Rng
{
  std::mt19937_64 g;
  explicit Rng(uint64_t seed)
  : g(seed) {}
  uint64_t u() {return g();}
  size_t below(size_t n) {return n == 0 ? 0 : static_cast<size_t>(g() % n);}
};

struct CLang
{
  using Members = rosidl_typesupport_introspection_c__MessageMembers;
  using Member = rosidl_typesupport_introspection_c__MessageMember;
  static constexpr bool cpp = false;
};
struct CppLang
{
  using Members = tic::MessageMembers;
  using Member = tic::MessageMember;
  static constexpr bool cpp = true;
};

template<class L>
void fill(const typename L::Members * ms, void * msg, Rng & r, int depth);

std::string random_text(Rng & r, size_t bound)
{
  size_t n = r.below((bound != 0 ? std::min<size_t>(bound, 40) : 40) + 1);
  std::string s;
  for (size_t i = 0; i < n; i++) {
    s += static_cast<char>(0x20 + r.below(0x5f));
  }
  return s;
}

template<class L>
void fill_value(const typename L::Member & m, void * p, Rng & r, int depth)
{
  switch (m.type_id_) {
    case rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN: {
        bool b = (r.u() & 1) != 0;
        std::memcpy(p, &b, 1);
        break;
      }
    case rosidl_typesupport_introspection_c__ROS_TYPE_FLOAT: {
        // Finite values only, so that == compares them.
        float f = static_cast<float>(static_cast<int32_t>(r.below(2000001)) - 1000000) / 7.0f;
        std::memcpy(p, &f, 4);
        break;
      }
    case rosidl_typesupport_introspection_c__ROS_TYPE_DOUBLE: {
        double d = static_cast<double>(static_cast<int64_t>(r.below(2000000001)) - 1000000000) /
          3.0;
        std::memcpy(p, &d, 8);
        break;
      }
    case rosidl_typesupport_introspection_c__ROS_TYPE_STRING: {
        std::string s = random_text(r, m.string_upper_bound_);
        if (L::cpp) {
          *static_cast<std::string *>(p) = s;
        } else if (!rosidl_runtime_c__String__assignn(
            static_cast<rosidl_runtime_c__String *>(p), s.data(), s.size()))
        {
          std::abort();
        }
        break;
      }
    case rosidl_typesupport_introspection_c__ROS_TYPE_WSTRING: {
        size_t bound = m.string_upper_bound_;
        size_t n = r.below((bound != 0 ? std::min<size_t>(bound, 20) : 20) + 1);
        std::u16string s;
        for (size_t i = 0; i < n; i++) {
          s += static_cast<char16_t>(1 + r.below(0xfffe));
        }
        if (L::cpp) {
          *static_cast<std::u16string *>(p) = s;
        } else {
          auto * c = static_cast<rosidl_runtime_c__U16String *>(p);
          if (!rosidl_runtime_c__U16String__resize(c, n)) {
            std::abort();
          }
          std::memcpy(c->data, s.data(), 2 * n);
        }
        break;
      }
    case rosidl_typesupport_introspection_c__ROS_TYPE_MESSAGE:
      fill<L>(static_cast<const typename L::Members *>(m.members_->data), p, r, depth + 1);
      break;
    default: {
        size_t size = 0;
        switch (m.type_id_) {
          case rosidl_typesupport_introspection_c__ROS_TYPE_OCTET:
          case rosidl_typesupport_introspection_c__ROS_TYPE_UINT8:
          case rosidl_typesupport_introspection_c__ROS_TYPE_INT8:
          case rosidl_typesupport_introspection_c__ROS_TYPE_CHAR:
            size = 1;
            break;
          case rosidl_typesupport_introspection_c__ROS_TYPE_UINT16:
          case rosidl_typesupport_introspection_c__ROS_TYPE_INT16:
          case rosidl_typesupport_introspection_c__ROS_TYPE_WCHAR:
            size = 2;
            break;
          case rosidl_typesupport_introspection_c__ROS_TYPE_UINT32:
          case rosidl_typesupport_introspection_c__ROS_TYPE_INT32:
            size = 4;
            break;
          case rosidl_typesupport_introspection_c__ROS_TYPE_UINT64:
          case rosidl_typesupport_introspection_c__ROS_TYPE_INT64:
            size = 8;
            break;
          default:
            std::fprintf(stderr, "no random value for type id %d\n", m.type_id_);
            std::abort();
        }
        uint64_t v = r.u();
        std::memcpy(p, &v, size);
      }
  }
}

template<class L>
void fill(const typename L::Members * ms, void * msg, Rng & r, int depth)
{
  for (uint32_t i = 0; i < ms->member_count_; i++) {
    const auto & m = ms->members_[i];
    void * f = static_cast<uint8_t *>(msg) + m.offset_;
    if (!m.is_array_) {
      fill_value<L>(m, f, r, depth);
    } else if (m.array_size_ != 0 && !m.is_upper_bound_) {
      for (size_t k = 0; k < m.array_size_; k++) {
        fill_value<L>(m, m.get_function(f, k), r, depth);
      }
    } else {
      size_t most = m.is_upper_bound_ ? m.array_size_ : (depth > 0 ? 3 : 24);
      size_t n = r.below(most + 1);
      if constexpr (L::cpp) {
        m.resize_function(f, n);
      } else {
        if (!m.resize_function(f, n)) {
          std::abort();
        }
      }
      for (size_t k = 0; k < n; k++) {
        if (L::cpp && m.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN) {
          bool b = (r.u() & 1) != 0;
          m.assign_function(f, k, &b);  // std::vector<bool> has no element pointer
        } else {
          fill_value<L>(m, m.get_function(f, k), r, depth);
        }
      }
    }
  }
}

// ---- an independent CDR walker that turns a little-endian buffer into a big-endian one ----

struct Swapper
{
  Bytes & b;
  size_t pos = 4;
  void align(size_t a)
  {
    size_t rel = pos - 4;
    pos += (a - rel % a) % a;
  }
  void swap(size_t n)
  {
    align(n < 8 ? n : 8);
    std::reverse(b.begin() + static_cast<ptrdiff_t>(pos),
      b.begin() + static_cast<ptrdiff_t>(pos + n));
    pos += n;
  }
  uint32_t u32()
  {
    align(4);
    uint32_t v;
    std::memcpy(&v, &b[pos], 4);
    swap(4);
    return v;
  }
  void value(const tic::MessageMember & m)
  {
    switch (m.type_id_) {
      case rosidl_typesupport_introspection_c__ROS_TYPE_STRING:
        pos += u32();
        break;
      case rosidl_typesupport_introspection_c__ROS_TYPE_WSTRING: {
          uint32_t n = u32();
          for (uint32_t i = 0; i < n; i++) {
            swap(4);
          }
          break;
        }
      case rosidl_typesupport_introspection_c__ROS_TYPE_MESSAGE:
        walk(static_cast<const tic::MessageMembers *>(m.members_->data));
        break;
      case rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN:
      case rosidl_typesupport_introspection_c__ROS_TYPE_OCTET:
      case rosidl_typesupport_introspection_c__ROS_TYPE_UINT8:
      case rosidl_typesupport_introspection_c__ROS_TYPE_INT8:
      case rosidl_typesupport_introspection_c__ROS_TYPE_CHAR:
        pos += 1;
        break;
      case rosidl_typesupport_introspection_c__ROS_TYPE_UINT16:
      case rosidl_typesupport_introspection_c__ROS_TYPE_INT16:
      case rosidl_typesupport_introspection_c__ROS_TYPE_WCHAR:
        swap(2);
        break;
      case rosidl_typesupport_introspection_c__ROS_TYPE_UINT32:
      case rosidl_typesupport_introspection_c__ROS_TYPE_INT32:
      case rosidl_typesupport_introspection_c__ROS_TYPE_FLOAT:
        swap(4);
        break;
      default:
        swap(8);
    }
  }
  void walk(const tic::MessageMembers * ms)
  {
    for (uint32_t i = 0; i < ms->member_count_; i++) {
      const auto & m = ms->members_[i];
      size_t n = 1;
      if (m.is_array_) {
        n = (m.array_size_ != 0 && !m.is_upper_bound_) ? m.array_size_ : u32();
      }
      for (size_t k = 0; k < n; k++) {
        value(m);
      }
    }
  }
};

Bytes to_big_endian(Bytes b, const rosidl_message_type_support_t * cpp_handle)
{
  const rosidl_message_type_support_t * h =
    get_message_typesupport_handle(cpp_handle, tic::typesupport_identifier);
  Swapper s{b};
  s.walk(static_cast<const tic::MessageMembers *>(h->data));
  CHECK(s.pos == b.size(), "the swapper walked %zu of %zu bytes", s.pos, b.size());
  b[1] = 0x00;
  return b;
}

// ---- the types ----

struct TypeCase
{
  const char * name;
  const rosidl_message_type_support_t * c;
  const rosidl_message_type_support_t * cpp;
  bool (*equal)(const void *, const void *);
  bool plain;
  int rounds;
};

template<class T>
bool equal_as(const void * a, const void * b)
{
  return *static_cast<const T *>(a) == *static_cast<const T *>(b);
}

#define CASE(pkg, sub, Name, plain, rounds) \
  TypeCase{#pkg "/" #sub "/" #Name, ROSIDL_GET_MSG_TYPE_SUPPORT(pkg, sub, Name), \
    rosidl_typesupport_cpp::get_message_type_support_handle<pkg::sub::Name>(), \
    equal_as<pkg::sub::Name>, plain, rounds}

std::vector<TypeCase> type_cases()
{
  return {
    CASE(test_msgs, msg, Arrays, false, 12),
    CASE(test_msgs, msg, BasicTypes, true, 12),
    CASE(test_msgs, msg, BoundedPlainSequences, false, 12),
    CASE(test_msgs, msg, BoundedSequences, false, 12),
    CASE(test_msgs, msg, Builtins, true, 12),
    CASE(test_msgs, msg, Constants, true, 4),
    CASE(test_msgs, msg, Defaults, true, 4),
    CASE(test_msgs, msg, Empty, true, 4),
    CASE(test_msgs, msg, MultiNested, false, 3),
    CASE(test_msgs, msg, Nested, true, 12),
    CASE(test_msgs, msg, Strings, false, 12),
    CASE(test_msgs, msg, UnboundedSequences, false, 12),
    CASE(test_msgs, msg, WStrings, false, 12),
    CASE(test_msgs, srv, Arrays_Request, false, 4),
    CASE(test_msgs, srv, Arrays_Response, false, 4),
    CASE(test_msgs, srv, BasicTypes_Request, false, 4),
    CASE(test_msgs, srv, BasicTypes_Response, false, 4),
    CASE(sensor_msgs, msg, Image, false, 8),
    CASE(sensor_msgs, msg, PointCloud2, false, 8),
    CASE(sensor_msgs, msg, CameraInfo, false, 8),
    CASE(sensor_msgs, msg, Imu, false, 8),
    CASE(std_msgs, msg, String, false, 8),
    CASE(geometry_msgs, msg, Pose, true, 8),
    CASE(geometry_msgs, msg, PoseArray, false, 8),
    CASE(geometry_msgs, msg, Twist, true, 8),
    CASE(builtin_interfaces, msg, Time, true, 4),
    CASE(rcl_interfaces, msg, ParameterEvent, false, 8),
    CASE(rcl_interfaces, msg, Log, false, 8),
  };
}

// Every way a buffer can be cut or corrupted: never accepted when cut, never a crash, never an
// allocation beyond what the buffer could describe.
void abuse(const ts::MessageType * t, const Bytes & good, Rng & r, bool all_truncations)
{
  Msg m(t);
  for (size_t len = 0; len < good.size(); len++) {
    if (!all_truncations && len > 64 && len + 64 < good.size() && r.below(8) != 0) {
      continue;
    }
    size_t before = heap_in_use();
    bool ok = ts::cdr_read(t, good.data(), len, m.p);
    size_t after = heap_in_use();
    CHECK(!ok, "%s accepted a buffer cut to %zu of %zu bytes", ts::type_name(t).c_str(), len,
      good.size());
    CHECK(after <= before || after - before <= 64 * len + (1u << 20),
      "%s: parsing %zu bytes allocated %zu bytes", ts::type_name(t).c_str(), len, after - before);
    rcutils_reset_error();
    counts.truncations++;
  }
  auto try_parse = [&](Bytes & bad) {
      size_t before = heap_in_use();
      bool ok = ts::cdr_read(t, bad.data(), bad.size(), m.p);
      size_t after = heap_in_use();
      CHECK(after <= before || after - before <= 64 * bad.size() + (1u << 20),
        "%s: parsing %zu corrupted bytes allocated %zu bytes", ts::type_name(t).c_str(),
        bad.size(), after - before);
      rcutils_reset_error();
      counts.mutations++;
      if (ok) {
        counts.mutations_accepted++;
        // What was accepted is a valid message: it serialises again.
        Bytes again = write(t, m.p);
        CHECK(again.size() >= 4, "re-serialised to %zu bytes", again.size());
      }
    };
  // Random bytes changed.
  for (int i = 0; i < 150; i++) {
    Bytes bad = good;
    int flips = 1 + static_cast<int>(r.below(3));
    for (int k = 0; k < flips; k++) {
      bad[r.below(bad.size())] = static_cast<uint8_t>(r.u());
    }
    try_parse(bad);
  }
  // Huge lengths wherever a length could be.
  static const uint32_t huge[] = {0xffffffffu, 0x80000000u, 0x7fffffffu, 0x10000000u, 0x00ffffffu};
  for (size_t pos = 4; pos + 4 <= good.size(); pos += 4) {
    for (uint32_t h : huge) {
      Bytes bad = good;
      std::memcpy(&bad[pos], &h, 4);
      try_parse(bad);
    }
  }
  // The wrong encapsulation is refused.
  Bytes bad = good;
  bad[1] = 0x02;
  CHECK(!ts::cdr_read(t, bad.data(), bad.size(), m.p), "encapsulation 0x0002 accepted");
  rcutils_reset_error();
}

// The three-way check of one serialisation: bytes equal rmw_cyclonedds_cpp's, what is parsed
// from them (as written and byte-swapped) re-serialises to them, in C and C++.
void check_bytes(
  const TypeCase & tc, const ts::MessageType * tcpp, const ts::MessageType * tcc,
  const Bytes & cyc, const void * cpp_original)
{
  // C++ parse.
  Msg a(tcpp);
  bool ok = ts::cdr_read(tcpp, cyc.data(), cyc.size(), a.p);
  CHECK(ok, "%s (C++) refused rmw_cyclonedds_cpp's %zu bytes: %s", tc.name, cyc.size(),
    rcutils_get_error_string().str);
  if (cpp_original != nullptr) {
    CHECK(tc.equal(a.p, cpp_original), "%s (C++): parsed message differs from the original",
      tc.name);
  }
  Bytes again = write(tcpp, a.p);
  CHECK(again == cyc, "%s (C++) re-serialised: %s", tc.name, first_difference(again, cyc).c_str());
  // C parse of the same bytes; C writes them back alike, and so does rmw_cyclonedds_cpp.
  Msg c(tcc);
  ok = ts::cdr_read(tcc, cyc.data(), cyc.size(), c.p);
  CHECK(ok, "%s (C) refused rmw_cyclonedds_cpp's bytes: %s", tc.name,
    rcutils_get_error_string().str);
  Bytes from_c = write(tcc, c.p);
  CHECK(from_c == cyc, "%s (C) re-serialised: %s", tc.name, first_difference(from_c, cyc).c_str());
  Bytes cyc_c = cyclone.run(c.p, tc.c);
  CHECK(cyc_c == cyc, "%s: rmw_cyclonedds_cpp of the C message: %s", tc.name,
    first_difference(cyc_c, cyc).c_str());
  counts.messages += 2;
  counts.bytes += 2 * cyc.size();
  // Big-endian, into messages that already hold data (the reuse path).
  Bytes be = to_big_endian(cyc, tc.cpp);
  ok = ts::cdr_read(tcpp, be.data(), be.size(), a.p);
  CHECK(ok, "%s (C++) refused the big-endian bytes: %s", tc.name, rcutils_get_error_string().str);
  if (cpp_original != nullptr) {
    CHECK(tc.equal(a.p, cpp_original), "%s (C++): big-endian parse differs", tc.name);
  }
  again = write(tcpp, a.p);
  CHECK(again == cyc, "%s (C++) from big-endian: %s", tc.name, first_difference(again, cyc).c_str());
  ok = ts::cdr_read(tcc, be.data(), be.size(), c.p);
  CHECK(ok, "%s (C) refused the big-endian bytes", tc.name);
  from_c = write(tcc, c.p);
  CHECK(from_c == cyc, "%s (C) from big-endian: %s", tc.name, first_difference(from_c, cyc).c_str());
  rcutils_reset_error();
}

void check_type(const TypeCase & tc, Rng & r)
{
  const ts::MessageType * tcpp = ts::message_type_get(tc.cpp);
  const ts::MessageType * tcc = ts::message_type_get(tc.c);
  CHECK(tcpp != nullptr && tcc != nullptr, "%s: no description: %s", tc.name,
    rcutils_get_error_string().str);
  if (tcpp == nullptr || tcc == nullptr) {
    return;
  }
  counts.types++;
  CHECK(tcpp != tcc, "%s: C and C++ share a description", tc.name);
  CHECK(ts::type_name(tcpp) == tc.name && ts::type_name(tcc) == tc.name,
    "names %s / %s, expected %s", ts::type_name(tcpp).c_str(), ts::type_name(tcc).c_str(),
    tc.name);
  CHECK(ts::type_hash(tcpp) == ts::type_hash(tcc), "%s: C hash %016" PRIx64 " != C++ %016" PRIx64,
    tc.name, ts::type_hash(tcc), ts::type_hash(tcpp));
  CHECK(ts::is_plain(tcpp) == tc.plain && ts::is_plain(tcc) == tc.plain,
    "%s: is_plain C++ %d C %d, expected %d", tc.name, ts::is_plain(tcpp), ts::is_plain(tcc),
    tc.plain);
  if (tc.plain) {
    CHECK(ts::message_size(tcpp) == ts::message_size(tcc), "%s: plain but sizes %zu (C++) %zu (C)",
      tc.name, ts::message_size(tcpp), ts::message_size(tcc));
  }
  CHECK(ts::definition(tcpp) == ts::definition(tcc), "%s: C and C++ definitions differ", tc.name);
  // The same description through the introspection handles themselves, and again (cached).
  const rosidl_message_type_support_t * icpp =
    get_message_typesupport_handle(tc.cpp, tic::typesupport_identifier);
  const rosidl_message_type_support_t * ic =
    get_message_typesupport_handle(tc.c, rosidl_typesupport_introspection_c__identifier);
  CHECK(ts::message_type_get(icpp) == tcpp, "%s: C++ introspection handle gives another", tc.name);
  CHECK(ts::message_type_get(ic) == tcc, "%s: C introspection handle gives another", tc.name);
  CHECK(ts::message_type_get(tc.cpp) == tcpp, "%s: not cached", tc.name);

  for (int round = 0; round < tc.rounds; round++) {
    // C++ contents.
    Msg m(tcpp);
    fill<CppLang>(static_cast<const tic::MessageMembers *>(icpp->data), m.p, r, 0);
    Bytes cyc = cyclone.run(m.p, tc.cpp);
    Bytes ours = write(tcpp, m.p);
    CHECK(ours == cyc, "%s (C++, round %d) vs rmw_cyclonedds_cpp: %s", tc.name, round,
      first_difference(ours, cyc).c_str());
    counts.messages++;
    counts.bytes += cyc.size();
    check_bytes(tc, tcpp, tcc, cyc, m.p);
    if (round < 2) {
      abuse(tcpp, cyc, r, round == 0);
      Msg mc(tcc);
      abuse(tcc, cyc, r, round == 0);
    }
    // C contents, filled independently.
    Msg mc(tcc);
    fill<CLang>(static_cast<const rosidl_typesupport_introspection_c__MessageMembers *>(ic->data),
      mc.p, r, 0);
    Bytes cyc_c = cyclone.run(mc.p, tc.c);
    Bytes ours_c = write(tcc, mc.p);
    CHECK(ours_c == cyc_c, "%s (C, round %d) vs rmw_cyclonedds_cpp: %s", tc.name, round,
      first_difference(ours_c, cyc_c).c_str());
    counts.messages++;
    counts.bytes += cyc_c.size();
    check_bytes(tc, tcpp, tcc, cyc_c, nullptr);
  }
}

// test_msgs' own fixtures (extreme values: limits, empty and full sequences).
template<class T>
void check_fixtures(
  const char * name, const std::vector<std::shared_ptr<T>> & msgs, bool plain)
{
  TypeCase tc{name, nullptr, rosidl_typesupport_cpp::get_message_type_support_handle<T>(),
    equal_as<T>, plain, 0};
  const ts::MessageType * tcpp = ts::message_type_get(tc.cpp);
  for (const auto & c : type_cases()) {
    if (std::strcmp(c.name, name) == 0) {
      tc.c = c.c;
    }
  }
  const ts::MessageType * tcc = ts::message_type_get(tc.c);
  for (const auto & msg : msgs) {
    Bytes cyc = cyclone.run(msg.get(), tc.cpp);
    Bytes ours = write(tcpp, msg.get());
    CHECK(ours == cyc, "%s fixture vs rmw_cyclonedds_cpp: %s", name,
      first_difference(ours, cyc).c_str());
    counts.messages++;
    counts.bytes += cyc.size();
    check_bytes(tc, tcpp, tcc, cyc, msg.get());
  }
}

// Fields of a .msg file as introspection can know them: no comments, constants or default
// values, and .msg's char is uint8 in the introspection.
std::string msg_file_fields(const std::string & path)
{
  std::ifstream in(path);
  if (!in) {
    return "";
  }
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream ws(line);
    std::string type;
    std::string name;
    std::string next;
    if (!(ws >> type >> name)) {
      continue;
    }
    if (name.find('=') != std::string::npos || ((ws >> next) && next[0] == '=')) {
      continue;  // a constant: NAME=value or NAME = value
    }
    if (type.compare(0, 4, "char") == 0) {
      type = "uint8" + type.substr(4);
    }
    out += type + " " + name + "\n";
  }
  return out;
}

// names.c's text with constants and default values left out (introspection has neither).
std::string without_constants(const char * def)
{
  std::istringstream in(def);
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    if (line.compare(0, 4, "MSG:") == 0 || line.compare(0, 4, "====") == 0) {
      out += line + "\n";
      continue;
    }
    std::istringstream ws(line);
    std::string type;
    std::string name;
    ws >> type >> name;
    if (name.find('=') == std::string::npos) {
      out += type + " " + name + "\n";
    }
  }
  return out;
}

void check_definitions()
{
  auto def_of = [](const rosidl_message_type_support_t * h) {
      const ts::MessageType * t = ts::message_type_get(h);
      return t != nullptr ? ts::definition(t) : std::string();
    };
  std::string image = def_of(
    rosidl_typesupport_cpp::get_message_type_support_handle<sensor_msgs::msg::Image>());
  CHECK(image == ferry_ros2_definition(FERRY_ROS2_IMAGE),
    "sensor_msgs/msg/Image definition:\n%s\nexpected (src/ros2/names.c):\n%s", image.c_str(),
    ferry_ros2_definition(FERRY_ROS2_IMAGE));
  std::string info = def_of(ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, CameraInfo));
  CHECK(info == ferry_ros2_definition(FERRY_ROS2_CAMERA_INFO),
    "sensor_msgs/msg/CameraInfo definition:\n%s\nexpected:\n%s", info.c_str(),
    ferry_ros2_definition(FERRY_ROS2_CAMERA_INFO));
  std::string cloud = def_of(ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, PointCloud2));
  CHECK(cloud == without_constants(ferry_ros2_definition(FERRY_ROS2_CLOUD)),
    "sensor_msgs/msg/PointCloud2 definition:\n%s\nexpected:\n%s", cloud.c_str(),
    without_constants(ferry_ros2_definition(FERRY_ROS2_CLOUD)).c_str());
  std::string imu = def_of(ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, Imu));
  CHECK(imu == without_constants(ferry_ros2_definition(FERRY_ROS2_IMU)),
    "sensor_msgs/msg/Imu definition:\n%s\nexpected:\n%s", imu.c_str(),
    without_constants(ferry_ros2_definition(FERRY_ROS2_IMU)).c_str());

  // Each test_msgs type's own section against its .msg file.
  int compared = 0;
  for (const auto & tc : type_cases()) {
    std::string n = tc.name;
    if (n.compare(0, 14, "test_msgs/msg/") != 0) {
      continue;
    }
    std::string file = msg_file_fields(
      std::string(TEST_INTERFACE_FILES_DIR) + "/msg/" + n.substr(14) + ".msg");
    if (file.empty() && n != "test_msgs/msg/Empty" && n != "test_msgs/msg/Constants") {
      continue;  // Builtins.msg is test_msgs' own, not in test_interface_files
    }
    std::string def = def_of(tc.cpp);
    std::string own = def.substr(0, def.find("\n====") == std::string::npos ?
        def.size() : def.find("\n====") + 1);
    CHECK(own == file, "%s definition:\n%s\nexpected from the .msg file:\n%s", tc.name,
      own.c_str(), file.c_str());
    compared++;
  }
  CHECK(compared >= 10, "only %d .msg files compared (looked in %s)", compared,
    TEST_INTERFACE_FILES_DIR);
  std::string multi = def_of(ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg, MultiNested));
  for (const char * dep : {"MSG: test_msgs/Arrays\n", "MSG: test_msgs/BoundedSequences\n",
      "MSG: test_msgs/UnboundedSequences\n", "MSG: test_msgs/BasicTypes\n",
      "MSG: test_msgs/Constants\n", "MSG: test_msgs/Defaults\n"})
  {
    size_t at = multi.find(dep);
    CHECK(at != std::string::npos && multi.find(dep, at + 1) == std::string::npos,
      "MultiNested's definition has %s not exactly once", dep);
  }
}

void check_hashes_differ()
{
  std::vector<std::pair<uint64_t, std::string>> hs;
  for (const auto & tc : type_cases()) {
    const ts::MessageType * t = ts::message_type_get(tc.cpp);
    if (t != nullptr) {
      hs.emplace_back(ts::type_hash(t), tc.name);
    }
  }
  for (size_t i = 0; i < hs.size(); i++) {
    for (size_t k = i + 1; k < hs.size(); k++) {
      CHECK(hs[i].first != hs[k].first, "%s and %s have the same hash", hs[i].second.c_str(),
        hs[k].second.c_str());
    }
  }
}

void check_services()
{
  const ts::MessageType * req = nullptr;
  const ts::MessageType * res = nullptr;
  const ts::MessageType * creq = nullptr;
  const ts::MessageType * cres = nullptr;
  bool ok = ts::service_types_get(
    rosidl_typesupport_cpp::get_service_type_support_handle<test_msgs::srv::Arrays>(), &req, &res);
  CHECK(ok, "service_types_get (C++): %s", rcutils_get_error_string().str);
  ok = ts::service_types_get(ROSIDL_GET_SRV_TYPE_SUPPORT(test_msgs, srv, Arrays), &creq, &cres);
  CHECK(ok, "service_types_get (C): %s", rcutils_get_error_string().str);
  if (req == nullptr || res == nullptr || creq == nullptr || cres == nullptr) {
    return;
  }
  CHECK(ts::type_name(req) == "test_msgs/srv/Arrays_Request", "request %s",
    ts::type_name(req).c_str());
  CHECK(ts::type_name(res) == "test_msgs/srv/Arrays_Response", "response %s",
    ts::type_name(res).c_str());
  CHECK(ts::type_hash(req) == ts::type_hash(creq) && ts::type_hash(res) == ts::type_hash(cres),
    "service hashes differ between C and C++");
  CHECK(ts::type_hash(req) != ts::type_hash(res), "request and response hash alike");
  const ts::MessageType * as_msg = ts::message_type_get(
    rosidl_typesupport_cpp::get_message_type_support_handle<test_msgs::srv::Arrays_Request>());
  CHECK(as_msg != nullptr && ts::type_hash(as_msg) == ts::type_hash(req),
    "the request as a message type has another hash");
  // A message handle is not a service handle, and a bogus identifier is refused with an error.
  rosidl_message_type_support_t bogus = *ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg, Empty);
  bogus.typesupport_identifier = "no_such_typesupport";
  bogus.func = get_message_typesupport_handle_function;
  CHECK(ts::message_type_get(&bogus) == nullptr, "a handle without introspection was accepted");
  CHECK(rcutils_error_is_set(), "no error message for a handle without introspection");
  rcutils_reset_error();
}

// Bounds a writer did not keep (rmw_cyclonedds_cpp writes whatever a C message holds, and its
// reader takes it) are refused here, as a DDS reader of the IDL type refuses them; and a string
// without its terminator is refused.
void check_bounds()
{
  const ts::MessageType * cs = ts::message_type_get(ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg,
      Strings));
  const ts::MessageType * cpps = ts::message_type_get(
    rosidl_typesupport_cpp::get_message_type_support_handle<test_msgs::msg::Strings>());
  Msg s(cs);
  auto * str = static_cast<test_msgs__msg__Strings *>(s.p);
  std::string at_bound(22, 'x');
  rosidl_runtime_c__String__assign(&str->bounded_string_value, at_bound.c_str());
  Bytes ok_bytes = write(cs, s.p);
  CHECK(ok_bytes == cyclone.run(s.p, ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg, Strings)),
    "a string at its bound differs from rmw_cyclonedds_cpp's");
  Msg back(cpps);
  CHECK(ts::cdr_read(cpps, ok_bytes.data(), ok_bytes.size(), back.p),
    "a string of 22 characters (its bound) refused");
  std::string over(23, 'y');
  rosidl_runtime_c__String__assign(&str->bounded_string_value, over.c_str());
  Bytes over_bytes = cyclone.run(s.p, ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg, Strings));
  CHECK(!ts::cdr_read(cpps, over_bytes.data(), over_bytes.size(), back.p),
    "a string of 23 characters (bound 22) accepted (C++)");
  CHECK(!ts::cdr_read(cs, over_bytes.data(), over_bytes.size(), s.p),
    "a string of 23 characters (bound 22) accepted (C)");
  // The first string's terminator replaced: refused.
  Bytes unterminated = ok_bytes;
  uint32_t len;
  std::memcpy(&len, &unterminated[4], 4);
  unterminated[8 + len - 1] = 'z';
  CHECK(!ts::cdr_read(cpps, unterminated.data(), unterminated.size(), back.p),
    "a string without its terminator accepted");

  // A bounded sequence one longer than its bound.
  const ts::MessageType * cb = ts::message_type_get(ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg,
      BoundedPlainSequences));
  const ts::MessageType * cppb = ts::message_type_get(
    rosidl_typesupport_cpp::get_message_type_support_handle<test_msgs::msg::BoundedPlainSequences>());
  Msg b(cb);
  auto * bs = static_cast<test_msgs__msg__BoundedPlainSequences *>(b.p);
  CHECK(rosidl_runtime_c__int32__Sequence__init(&bs->int32_values, 4), "init");
  Bytes seq_over = cyclone.run(b.p, ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg,
      BoundedPlainSequences));
  Msg bb(cppb);
  CHECK(!ts::cdr_read(cppb, seq_over.data(), seq_over.size(), bb.p),
    "a sequence of 4 (bound 3) accepted (C++: BoundedVector would throw)");
  CHECK(!ts::cdr_read(cb, seq_over.data(), seq_over.size(), b.p),
    "a sequence of 4 (bound 3) accepted (C)");
  rcutils_reset_error();

  // A bounded sequence of wstrings one longer than its bound.
  const ts::MessageType * cw = ts::message_type_get(ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg,
      WStrings));
  const ts::MessageType * cppw = ts::message_type_get(
    rosidl_typesupport_cpp::get_message_type_support_handle<test_msgs::msg::WStrings>());
  Msg w(cw);
  auto * ws = static_cast<test_msgs__msg__WStrings *>(w.p);
  CHECK(rosidl_runtime_c__U16String__Sequence__init(&ws->bounded_sequence_of_wstrings, 4), "init");
  Bytes wover = cyclone.run(w.p, ROSIDL_GET_MSG_TYPE_SUPPORT(test_msgs, msg, WStrings));
  CHECK(wover == write(cw, w.p), "wstrings over their bound differ from rmw_cyclonedds_cpp's");
  Msg ww(cppw);
  CHECK(!ts::cdr_read(cppw, wover.data(), wover.size(), ww.p),
    "4 wstrings (bound 3) accepted (C++)");
  CHECK(!ts::cdr_read(cw, wover.data(), wover.size(), w.p), "4 wstrings (bound 3) accepted (C)");
  rcutils_reset_error();
}

// Many threads asking for the same descriptions at once get the same ones.
void check_threads()
{
  std::vector<TypeCase> cases = type_cases();
  std::vector<std::vector<const ts::MessageType *>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); i++) {
    threads.emplace_back([&, i] {
        for (const auto & tc : cases) {
          got[i].push_back(ts::message_type_get((i & 1) ? tc.c : tc.cpp));
        }
      });
  }
  for (auto & th : threads) {
    th.join();
  }
  for (size_t i = 2; i < got.size(); i++) {
    CHECK(got[i] == got[i & 1], "thread %zu got other descriptions", i);
  }
}

double seconds_of_best(int runs, const std::function<void()> & f)
{
  double best = 1e9;
  for (int i = 0; i < runs; i++) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

void measure_image()
{
  const ts::MessageType * t = ts::message_type_get(
    rosidl_typesupport_cpp::get_message_type_support_handle<sensor_msgs::msg::Image>());
  sensor_msgs::msg::Image img;
  img.header.frame_id = "camera";
  img.height = 1080;
  img.width = 1920;
  img.encoding = "rgb8";
  img.step = 1920 * 3;
  img.data.resize(size_t{1920} * 1080 * 3);
  for (size_t i = 0; i < img.data.size(); i++) {
    img.data[i] = static_cast<uint8_t>(i * 7);
  }
  Bytes buf(ts::cdr_size(t, &img));
  Bytes copy(buf.size());
  double gb = static_cast<double>(buf.size()) / 1e9;
  double w = seconds_of_best(20, [&] {
        size_t n = ts::cdr_size(t, &img);
        ts::cdr_write(t, &img, buf.data(), n);
      });
  sensor_msgs::msg::Image back;
  double r_fresh = seconds_of_best(10, [&] {
        sensor_msgs::msg::Image fresh;
        if (!ts::cdr_read(t, buf.data(), buf.size(), &fresh)) {
          std::abort();
        }
      });
  double r_reuse = seconds_of_best(20, [&] {
        if (!ts::cdr_read(t, buf.data(), buf.size(), &back)) {
          std::abort();
        }
      });
  double mc = seconds_of_best(20, [&] {std::memcpy(copy.data(), buf.data(), buf.size());});
  CHECK(back == img, "the image read back differs");
  Bytes cyc = cyclone.run(&img, rosidl_typesupport_cpp::get_message_type_support_handle<
        sensor_msgs::msg::Image>());
  CHECK(cyc == buf, "image vs rmw_cyclonedds_cpp: %s", first_difference(buf, cyc).c_str());
  double cw = seconds_of_best(5, [&] {
        cyclone.run(&img, rosidl_typesupport_cpp::get_message_type_support_handle<
          sensor_msgs::msg::Image>());
      });
  std::printf(
    "typesupport_test: 1920x1080 rgb8 image (%zu bytes of CDR), best of runs:\n"
    "  serialise (cdr_size + cdr_write)   %7.3f ms  %6.2f GB/s\n"
    "  parse into a reused message        %7.3f ms  %6.2f GB/s\n"
    "  parse into a new message           %7.3f ms  %6.2f GB/s\n"
    "  memcpy of as many bytes            %7.3f ms  %6.2f GB/s\n"
    "  rmw_cyclonedds_cpp rmw_serialize   %7.3f ms  %6.2f GB/s (its buffer allocated each time)\n",
    buf.size(), w * 1e3, gb / w, r_reuse * 1e3, gb / r_reuse, r_fresh * 1e3, gb / r_fresh,
    mc * 1e3, gb / mc, cw * 1e3, gb / cw);
}

}  // namespace

int main()
{
  if (!cyclone.load()) {
    return 77;
  }
  Rng r(0x5eed'cafe'f00dull);
  for (const auto & tc : type_cases()) {
    check_type(tc, r);
  }
  check_fixtures("test_msgs/msg/Arrays", get_messages_arrays(), false);
  check_fixtures("test_msgs/msg/BasicTypes", get_messages_basic_types(), true);
  check_fixtures("test_msgs/msg/BoundedPlainSequences", get_messages_bounded_plain_sequences(),
    false);
  check_fixtures("test_msgs/msg/BoundedSequences", get_messages_bounded_sequences(), false);
  check_fixtures("test_msgs/msg/Builtins", get_messages_builtins(), true);
  check_fixtures("test_msgs/msg/Constants", get_messages_constants(), true);
  check_fixtures("test_msgs/msg/Defaults", get_messages_defaults(), true);
  check_fixtures("test_msgs/msg/Empty", get_messages_empty(), true);
  check_fixtures("test_msgs/msg/MultiNested", get_messages_multi_nested(), false);
  check_fixtures("test_msgs/msg/Nested", get_messages_nested(), true);
  check_fixtures("test_msgs/msg/Strings", get_messages_strings(), false);
  check_fixtures("test_msgs/msg/UnboundedSequences", get_messages_unbounded_sequences(), false);
  check_fixtures("test_msgs/msg/WStrings", get_messages_wstrings(), false);
  check_definitions();
  check_hashes_differ();
  check_services();
  check_bounds();
  check_threads();
  measure_image();
  std::printf(
    "typesupport_test: %zu types in C and C++, %zu serialisations (%zu bytes) equal to "
    "rmw_cyclonedds_cpp's, %zu truncations refused, %zu corrupted buffers parsed safely "
    "(%zu accepted), %d failures\n",
    counts.types, counts.messages, counts.bytes, counts.truncations, counts.mutations,
    counts.mutations_accepted, failures);
  return failures == 0 ? 0 : 1;
}
