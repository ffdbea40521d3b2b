// Message types from rosidl introspection: each type is turned once into a flat list of ops
// (nested single messages inlined, offsets made absolute), which the serialiser, the size
// counter and the parser walk with no per-element indirect call for primitives.
#include "typesupport.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "rcutils/error_handling.h"
#include "rmw/error_handling.h"
#include "rosidl_runtime_c/string.h"
#include "rosidl_runtime_c/string_functions.h"
#include "rosidl_runtime_c/u16string.h"
#include "rosidl_runtime_c/u16string_functions.h"
#include "rosidl_typesupport_introspection_c/field_types.h"
#include "rosidl_typesupport_introspection_c/identifier.h"
#include "rosidl_typesupport_introspection_c/message_introspection.h"
#include "rosidl_typesupport_introspection_c/service_introspection.h"
#include "rosidl_typesupport_introspection_cpp/identifier.hpp"
#include "rosidl_typesupport_introspection_cpp/message_introspection.hpp"
#include "rosidl_typesupport_introspection_cpp/service_introspection.hpp"

namespace rmw_ferry
{

namespace
{

enum class Lang : uint8_t { C, Cpp };

// Where the elements of a field lie: in the message itself (a single value is an array of one),
// in a rosidl C sequence, in a C++ std::vector (reached through the member's functions), or in
// a C++ std::vector<bool>, which has no element pointer to give.
// BytesCpp: an unbounded C++ sequence of unsigned char (uint8, byte, char: an image's data), read
// with one copy (assign) instead of a zero-filling resize and a copy.
enum class Container : uint8_t { Array, SeqC, SeqCpp, BoolVecCpp, BytesCpp };

// What one element is. Prim covers every primitive but bool, whose bytes are normalised to 0/1
// on reading (any other value in a bool is undefined behaviour in C++).
enum class Elem : uint8_t { Prim, Bool, Str, WStr, Msg };

struct CSequence
{
  void * data;
  size_t size;
  size_t capacity;
};

}  // namespace

// One field of the type as declared (for the definition and the hash); the ops below are what
// the serialiser walks.
struct Field
{
  std::string name;
  uint8_t type_id;
  size_t string_bound;
  bool is_array;
  size_t array_size;
  bool is_upper_bound;
  const MessageType * sub;
};

struct Op
{
  Container container;
  Elem elem;
  uint8_t esize;      // Prim/Bool: bytes of one element, in memory and in CDR
  uint8_t align;      // Prim/Bool: its CDR alignment
  size_t offset;      // of the field from the start of the outermost message
  size_t count;       // Array: elements
  size_t bound;       // sequences: most elements; 0 = unbounded
  size_t str_bound;   // Str/WStr: most characters; 0 = unbounded
  size_t stride;      // bytes of one element in memory
  size_t min_cdr;     // fewest CDR bytes one element takes (the parser's allocation guard)
  const MessageType * sub;  // Msg
  size_t (* cpp_size)(const void *);
  const void * (*cpp_get_const)(const void *, size_t);
  void * (*cpp_get)(void *, size_t);
  void (* cpp_resize)(void *, size_t);
  bool (* c_resize)(void *, size_t);
};

struct MessageType
{
  std::string name;            // package/msg/Name
  std::string package;
  Lang lang;
  size_t size_of;
  uint32_t member_count;
  std::vector<Field> fields;
  std::vector<Op> ops;
  bool plain;
  // The memory image is the CDR image (no padding anywhere, every element at an offset its CDR
  // alignment divides) when it starts at a CDR offset that `align`
  // divides (CDR pads before members, never before a structure);
  // flat_read additionally needs no bool, whose bytes the parser must check.
  bool flat;
  bool flat_read;
  size_t align;                // largest CDR alignment inside (1 for none)
  size_t min_cdr;              // fewest CDR bytes a value takes, at least 1
  size_t plain_cdr_size;       // plain types: cdr_size, the header included
  uint64_t hash;
  std::string canonical;       // what the hash hashes
  std::string definition;
  void (* c_init)(void *, enum rosidl_runtime_c__message_initialization);
  void (* c_fini)(void *);
  void (* cpp_init)(void *, rosidl_runtime_cpp::MessageInitialization);
  void (* cpp_fini)(void *);
};

namespace
{

namespace tic = rosidl_typesupport_introspection_cpp;

// The bytes a primitive takes in memory and in CDR (the same for all of them); 0 for the rest.
size_t prim_size(uint8_t type_id)
{
  switch (type_id) {
    case rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN:
    case rosidl_typesupport_introspection_c__ROS_TYPE_OCTET:
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT8:
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT8:
    case rosidl_typesupport_introspection_c__ROS_TYPE_CHAR:
      return 1;
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT16:
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT16:
    case rosidl_typesupport_introspection_c__ROS_TYPE_WCHAR:
      return 2;
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT32:
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT32:
    case rosidl_typesupport_introspection_c__ROS_TYPE_FLOAT:
      return 4;
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT64:
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT64:
    case rosidl_typesupport_introspection_c__ROS_TYPE_DOUBLE:
      return 8;
    case rosidl_typesupport_introspection_c__ROS_TYPE_LONG_DOUBLE:
      // As rmw_cyclonedds_cpp writes it: the 16 bytes of the in-memory long double, aligned to 8
      // (on x86-64 six of them are padding, so two machines agree only on the same ABI).
      return sizeof(long double) == 16 ? 16 : 0;
    default:
      return 0;
  }
}

const char * prim_msg_name(uint8_t type_id)
{
  switch (type_id) {
    case rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN: return "bool";
    case rosidl_typesupport_introspection_c__ROS_TYPE_OCTET: return "byte";
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT8: return "uint8";
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT8: return "int8";
    case rosidl_typesupport_introspection_c__ROS_TYPE_CHAR: return "char";
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT16: return "uint16";
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT16: return "int16";
    case rosidl_typesupport_introspection_c__ROS_TYPE_WCHAR: return "wchar";
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT32: return "uint32";
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT32: return "int32";
    case rosidl_typesupport_introspection_c__ROS_TYPE_FLOAT: return "float32";
    case rosidl_typesupport_introspection_c__ROS_TYPE_UINT64: return "uint64";
    case rosidl_typesupport_introspection_c__ROS_TYPE_INT64: return "int64";
    case rosidl_typesupport_introspection_c__ROS_TYPE_DOUBLE: return "float64";
    // .msg has no such type; this is IDL's name.
    case rosidl_typesupport_introspection_c__ROS_TYPE_LONG_DOUBLE: return "long double";
    default: return "?";
  }
}

void set_error(const std::string & what)
{
  rcutils_reset_error();
  RMW_SET_ERROR_MSG(what.c_str());
}

// "a__b" (C) and "a::b" (C++) namespaces both become "a/b".
std::string slash_namespace(const char * ns)
{
  std::string out;
  for (const char * p = ns; *p != '\0'; ) {
    if ((p[0] == ':' && p[1] == ':') || (p[0] == '_' && p[1] == '_')) {
      out += '/';
      p += 2;
    } else {
      out += *p++;
    }
  }
  return out;
}

struct CTraits
{
  using Members = rosidl_typesupport_introspection_c__MessageMembers;
  using Member = rosidl_typesupport_introspection_c__MessageMember;
  static constexpr Lang lang = Lang::C;
  static constexpr size_t str_size = sizeof(rosidl_runtime_c__String);
  static constexpr size_t wstr_size = sizeof(rosidl_runtime_c__U16String);
};

struct CppTraits
{
  using Members = tic::MessageMembers;
  using Member = tic::MessageMember;
  static constexpr Lang lang = Lang::Cpp;
  static constexpr size_t str_size = sizeof(std::string);
  static constexpr size_t wstr_size = sizeof(std::u16string);
};

uint64_t fnv1a(const std::string & s)
{
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // A final mix so that short inputs still spread over all 64 bits.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

// The registry: every description built, by its introspection members and by the handles it
// was asked for through. Descriptions are never freed (they live as long as the process).
struct Registry
{
  std::mutex lock;
  std::map<const void *, std::unique_ptr<MessageType>> by_members;
  // Keyed by the handle and the identifier it carries: a handle whose identifier changed is
  // looked up again (and refused when no introspection answers to it).
  std::map<std::pair<const void *, const char *>, const MessageType *> by_handle;
};

Registry & registry()
{
  static Registry r;
  return r;
}

std::string field_type_text(const MessageType * owner, const Field & f)
{
  std::string s;
  if (f.type_id == rosidl_typesupport_introspection_c__ROS_TYPE_MESSAGE) {
    // rosbag2 stores the .msg text, where a type of the same package is named alone.
    const std::string & n = f.sub->name;
    size_t slash = n.rfind('/');
    if (f.sub->package == owner->package) {
      s = n.substr(slash + 1);
    } else {
      std::string ns = n.substr(0, slash);
      if (ns.size() > 4 && ns.compare(ns.size() - 4, 4, "/msg") == 0) {
        ns.resize(ns.size() - 4);
      }
      s = ns + n.substr(slash);
    }
  } else if (f.type_id == rosidl_typesupport_introspection_c__ROS_TYPE_STRING ||
    f.type_id == rosidl_typesupport_introspection_c__ROS_TYPE_WSTRING)
  {
    s = f.type_id == rosidl_typesupport_introspection_c__ROS_TYPE_STRING ? "string" : "wstring";
    if (f.string_bound != 0) {
      s += "<=" + std::to_string(f.string_bound);
    }
  } else {
    s = prim_msg_name(f.type_id);
  }
  if (f.is_array) {
    if (f.is_upper_bound) {
      s += "[<=" + std::to_string(f.array_size) + "]";
    } else if (f.array_size != 0) {
      s += "[" + std::to_string(f.array_size) + "]";
    } else {
      s += "[]";
    }
  }
  return s;
}

// The .msg lines of one type. Constants, default values and comments are not in the
// introspection, so they are not here (rosbag2's text has them; nothing that parses the schema
// needs them to decode the data). The member rosidl adds to an empty message is left out.
std::string msg_fields_text(const MessageType * t)
{
  std::string out;
  if (t->fields.size() == 1 && t->fields[0].name == "structure_needs_at_least_one_member") {
    return out;
  }
  for (const Field & f : t->fields) {
    out += field_type_text(t, f) + " " + f.name + "\n";
  }
  return out;
}

void collect_dependencies(
  const MessageType * t, std::vector<const MessageType *> & seen)
{
  for (const Field & f : t->fields) {
    if (f.sub == nullptr) {
      continue;
    }
    bool known = false;
    for (const MessageType * s : seen) {
      known = known || s->name == f.sub->name;
    }
    if (!known) {
      seen.push_back(f.sub);
      collect_dependencies(f.sub, seen);
    }
  }
}

std::string make_definition(const MessageType * t)
{
  std::string out = msg_fields_text(t);
  std::vector<const MessageType *> deps{t};
  collect_dependencies(t, deps);
  for (size_t i = 1; i < deps.size(); i++) {
    std::string n = deps[i]->name;
    size_t slash = n.rfind('/');
    std::string ns = n.substr(0, slash);
    if (ns.size() > 4 && ns.compare(ns.size() - 4, 4, "/msg") == 0) {
      ns.resize(ns.size() - 4);
    }
    out += std::string(80, '=') + "\nMSG: " + ns + n.substr(slash) + "\n" +
      msg_fields_text(deps[i]);
  }
  return out;
}

// Size and serialisation share one walk; Write selects whether bytes are stored.
template<bool Write>
struct Out
{
  uint8_t * b;   // the byte after the encapsulation header: CDR offsets count from here
  size_t pos;

  void pad(size_t a)
  {
    size_t m = pos & (a - 1);
    if (m != 0) {
      if (Write) {
        std::memset(b + pos, 0, a - m);
      }
      pos += a - m;
    }
  }
  void put(const void * p, size_t n)
  {
    if (Write && n != 0) {
      std::memcpy(b + pos, p, n);
    }
    pos += n;
  }
  void put_u32(size_t v)
  {
    pad(4);
    uint32_t u = static_cast<uint32_t>(v);
    put(&u, 4);
  }
};

template<bool Write>
void write_struct(const MessageType * t, const uint8_t * msg, Out<Write> & o);

template<bool Write>
void write_elems(const Op & op, const uint8_t * p, size_t n, Out<Write> & o)
{
  if (n == 0) {
    return;
  }
  switch (op.elem) {
    case Elem::Prim:
    case Elem::Bool:
      o.pad(op.align);
      o.put(p, n * op.esize);
      return;
    case Elem::Str:
      for (size_t i = 0; i < n; i++) {
        const char * data;
        size_t len;
        if (op.esize == 0) {
          const auto * s = reinterpret_cast<const rosidl_runtime_c__String *>(p + i * op.stride);
          data = s->data;
          len = s->size;
        } else {
          const auto * s = reinterpret_cast<const std::string *>(p + i * op.stride);
          data = s->data();
          len = s->size();
        }
        o.put_u32(len + 1);
        o.put(data, len);
        const char nul = '\0';
        o.put(&nul, 1);
      }
      return;
    case Elem::WStr:
      for (size_t i = 0; i < n; i++) {
        const uint16_t * data;
        size_t len;
        if (op.esize == 0) {
          const auto * s =
            reinterpret_cast<const rosidl_runtime_c__U16String *>(p + i * op.stride);
          data = s->data;
          len = s->size;
        } else {
          const auto * s = reinterpret_cast<const std::u16string *>(p + i * op.stride);
          data = reinterpret_cast<const uint16_t *>(s->data());
          len = s->size();
        }
        // rmw_cyclonedds_cpp's encoding: the count of UTF-16 units (no terminator), then each
        // unit widened to a 4-byte wchar_t.
        o.put_u32(len);
        if (Write) {
          for (size_t k = 0; k < len; k++) {
            uint32_t w = data[k];
            std::memcpy(o.b + o.pos + 4 * k, &w, 4);
          }
        }
        o.pos += 4 * len;
      }
      return;
    case Elem::Msg:
      // CDR aligns members, not structures: one copy for all only from an aligned start.
      if (op.sub->flat && (o.pos & (op.sub->align - 1)) == 0) {
        o.put(p, n * op.sub->size_of);
      } else {
        for (size_t i = 0; i < n; i++) {
          write_struct(op.sub, p + i * op.stride, o);
        }
      }
      return;
  }
}

template<bool Write>
void write_struct(const MessageType * t, const uint8_t * msg, Out<Write> & o)
{
  if (t->flat && (o.pos & (t->align - 1)) == 0) {
    o.put(msg, t->size_of);
    return;
  }
  for (const Op & op : t->ops) {
    const uint8_t * f = msg + op.offset;
    switch (op.container) {
      case Container::Array:
        write_elems(op, f, op.count, o);
        break;
      case Container::SeqC: {
          const auto * s = reinterpret_cast<const CSequence *>(f);
          o.put_u32(s->size);
          write_elems(op, static_cast<const uint8_t *>(s->data), s->size, o);
          break;
        }
      case Container::SeqCpp:
      case Container::BytesCpp: {
          size_t n = op.cpp_size(f);
          o.put_u32(n);
          if (n != 0) {
            write_elems(op, static_cast<const uint8_t *>(op.cpp_get_const(f, 0)), n, o);
          }
          break;
        }
      case Container::BoolVecCpp: {
          // BoundedVector<bool> derives from std::vector<bool> alone, so this view holds too.
          const auto & v = *reinterpret_cast<const std::vector<bool> *>(f);
          o.put_u32(v.size());
          if (Write) {
            for (size_t k = 0; k < v.size(); k++) {
              o.b[o.pos + k] = v[k] ? 1 : 0;
            }
          }
          o.pos += v.size();
          break;
        }
    }
  }
}

struct In
{
  const uint8_t * b;   // after the encapsulation header
  size_t size;
  size_t pos;
  bool swap;

  bool align(size_t a)
  {
    size_t m = pos & (a - 1);
    if (m != 0) {
      if (a - m > size - pos) {
        return false;
      }
      pos += a - m;
    }
    return true;
  }
  bool get_u32(uint32_t & v)
  {
    if (!align(4) || size - pos < 4) {
      return false;
    }
    std::memcpy(&v, b + pos, 4);
    if (swap) {
      v = __builtin_bswap32(v);
    }
    pos += 4;
    return true;
  }
  size_t left() const {return size - pos;}
};

void swap_in_place(uint8_t * p, size_t n, size_t esize)
{
  switch (esize) {
    case 2:
      for (size_t i = 0; i < n; i++) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        v = __builtin_bswap16(v);
        std::memcpy(p + 2 * i, &v, 2);
      }
      break;
    case 4:
      for (size_t i = 0; i < n; i++) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        v = __builtin_bswap32(v);
        std::memcpy(p + 4 * i, &v, 4);
      }
      break;
    case 8:
      for (size_t i = 0; i < n; i++) {
        uint64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        v = __builtin_bswap64(v);
        std::memcpy(p + 8 * i, &v, 8);
      }
      break;
    case 16:
      for (size_t i = 0; i < n; i++) {
        uint8_t * e = p + 16 * i;
        for (size_t k = 0; k < 8; k++) {
          uint8_t t = e[k];
          e[k] = e[15 - k];
          e[15 - k] = t;
        }
      }
      break;
    default:
      break;
  }
}

bool read_struct(const MessageType * t, In & in, uint8_t * msg);

// A string: its length (the terminator included) read once, checked against the bytes left and
// the bound, the terminator checked, then the characters copied. A length of 0 is taken as the
// empty string, as rmw_cyclonedds_cpp takes it.
bool read_string(const Op & op, In & in, uint8_t * dst)
{
  uint32_t len;
  if (!in.get_u32(len) || len > in.left()) {
    return false;
  }
  const char * src = reinterpret_cast<const char *>(in.b + in.pos);
  size_t chars = 0;
  if (len != 0) {
    if (src[len - 1] != '\0') {
      return false;
    }
    chars = len - 1;
  }
  if (op.str_bound != 0 && chars > op.str_bound) {
    return false;
  }
  if (op.esize == 0) {
    auto * s = reinterpret_cast<rosidl_runtime_c__String *>(dst);
    if (!rosidl_runtime_c__String__assignn(s, src, chars)) {
      return false;
    }
  } else {
    reinterpret_cast<std::string *>(dst)->assign(src, chars);
  }
  in.pos += len;
  return true;
}

bool read_wstring(const Op & op, In & in, uint8_t * dst)
{
  uint32_t n;
  if (!in.get_u32(n) || n > in.left() / 4) {
    return false;
  }
  if (op.str_bound != 0 && n > op.str_bound) {
    return false;
  }
  uint16_t * out;
  if (op.esize == 0) {
    auto * s = reinterpret_cast<rosidl_runtime_c__U16String *>(dst);
    if (!rosidl_runtime_c__U16String__resize(s, n)) {
      return false;
    }
    out = s->data;
  } else {
    auto * s = reinterpret_cast<std::u16string *>(dst);
    s->resize(n);
    out = reinterpret_cast<uint16_t *>(&(*s)[0]);
  }
  const uint8_t * src = in.b + in.pos;
  for (size_t k = 0; k < n; k++) {
    uint32_t w;
    std::memcpy(&w, src + 4 * k, 4);
    if (in.swap) {
      w = __builtin_bswap32(w);
    }
    // Units above 0xffff cannot come from a UTF-16 string; they are cut as rmw_cyclonedds_cpp
    // cuts them.
    out[k] = static_cast<uint16_t>(w);
  }
  in.pos += 4 * static_cast<size_t>(n);
  return true;
}

bool read_elems(const Op & op, In & in, uint8_t * p, size_t n)
{
  if (n == 0) {
    return true;
  }
  switch (op.elem) {
    case Elem::Prim:
      if (!in.align(op.align) || n > in.left() / op.esize) {
        return false;
      }
      std::memcpy(p, in.b + in.pos, n * op.esize);
      if (in.swap && op.esize > 1) {
        swap_in_place(p, n, op.esize);
      }
      in.pos += n * op.esize;
      return true;
    case Elem::Bool:
      if (n > in.left()) {
        return false;
      }
      for (size_t i = 0; i < n; i++) {
        bool v = in.b[in.pos + i] != 0;
        std::memcpy(p + i, &v, 1);
      }
      in.pos += n;
      return true;
    case Elem::Str:
      for (size_t i = 0; i < n; i++) {
        if (!read_string(op, in, p + i * op.stride)) {
          return false;
        }
      }
      return true;
    case Elem::WStr:
      for (size_t i = 0; i < n; i++) {
        if (!read_wstring(op, in, p + i * op.stride)) {
          return false;
        }
      }
      return true;
    case Elem::Msg:
      if (op.sub->flat_read && !in.swap && (in.pos & (op.sub->align - 1)) == 0) {
        if (n > in.left() / op.sub->size_of) {
          return false;
        }
        std::memcpy(p, in.b + in.pos, n * op.sub->size_of);
        in.pos += n * op.sub->size_of;
        return true;
      }
      for (size_t i = 0; i < n; i++) {
        if (!read_struct(op.sub, in, p + i * op.stride)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

// A sequence's length, read once: within its bound and no more elements than the bytes left
// could describe (each element takes at least min_cdr bytes), before anything is allocated.
bool read_seq_len(const Op & op, In & in, uint32_t & n)
{
  if (!in.get_u32(n)) {
    return false;
  }
  if (op.bound != 0 && n > op.bound) {
    return false;
  }
  return n <= in.left() / op.min_cdr;
}

bool read_struct(const MessageType * t, In & in, uint8_t * msg)
{
  if (t->flat_read && !in.swap && (in.pos & (t->align - 1)) == 0) {
    if (in.left() < t->size_of) {
      return false;
    }
    std::memcpy(msg, in.b + in.pos, t->size_of);
    in.pos += t->size_of;
    return true;
  }
  for (const Op & op : t->ops) {
    uint8_t * f = msg + op.offset;
    uint32_t n;
    switch (op.container) {
      case Container::Array:
        if (!read_elems(op, in, f, op.count)) {
          return false;
        }
        break;
      case Container::SeqC: {
          if (!read_seq_len(op, in, n)) {
            return false;
          }
          auto * s = reinterpret_cast<CSequence *>(f);
          // The generated resize finalises and re-initialises every element: skipped when the
          // size is already right, as it is for a message reused for each sample.
          if (s->size != n && !op.c_resize(f, n)) {
            return false;
          }
          if (!read_elems(op, in, static_cast<uint8_t *>(s->data), n)) {
            return false;
          }
          break;
        }
      case Container::BytesCpp: {
          if (!read_seq_len(op, in, n) || n > in.left()) {
            return false;
          }
          auto & v = *reinterpret_cast<std::vector<unsigned char> *>(f);
          v.assign(in.b + in.pos, in.b + in.pos + n);
          in.pos += n;
          break;
        }
      case Container::SeqCpp:
        if (!read_seq_len(op, in, n)) {
          return false;
        }
        op.cpp_resize(f, n);
        if (n != 0 && !read_elems(op, in, static_cast<uint8_t *>(op.cpp_get(f, 0)), n)) {
          return false;
        }
        break;
      case Container::BoolVecCpp: {
          if (!read_seq_len(op, in, n)) {
            return false;
          }
          op.cpp_resize(f, n);
          auto & v = *reinterpret_cast<std::vector<bool> *>(f);
          for (size_t k = 0; k < n; k++) {
            v[k] = in.b[in.pos + k] != 0;
          }
          in.pos += n;
          break;
        }
    }
  }
  return true;
}

template<class Tr>
MessageType * build(Registry & r, const typename Tr::Members * m);

template<class Tr>
const typename Tr::Members * members_of(const rosidl_message_type_support_t * ts)
{
  return static_cast<const typename Tr::Members *>(ts->data);
}

template<class Tr>
bool add_op(MessageType * t, const typename Tr::Member & mm, const MessageType * sub)
{
  Op op{};
  op.offset = mm.offset_;
  op.str_bound = mm.string_upper_bound_;
  switch (mm.type_id_) {
    case rosidl_typesupport_introspection_c__ROS_TYPE_STRING:
      op.elem = Elem::Str;
      op.stride = Tr::str_size;
      op.min_cdr = 4;
      break;
    case rosidl_typesupport_introspection_c__ROS_TYPE_WSTRING:
      op.elem = Elem::WStr;
      op.stride = Tr::wstr_size;
      op.min_cdr = 4;
      break;
    case rosidl_typesupport_introspection_c__ROS_TYPE_MESSAGE:
      op.elem = Elem::Msg;
      op.sub = sub;
      op.stride = sub->size_of;
      op.min_cdr = sub->min_cdr;
      break;
    default: {
        size_t sz = prim_size(mm.type_id_);
        if (sz == 0) {
          set_error(
            "rmw_ferry: field " + std::string(mm.name_) + " of " + t->name +
            " has a type this implementation cannot serialise (id " +
            std::to_string(mm.type_id_) + ")");
          return false;
        }
        op.elem = mm.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_BOOLEAN ?
          Elem::Bool : Elem::Prim;
        op.esize = static_cast<uint8_t>(sz);
        op.align = static_cast<uint8_t>(sz < 8 ? sz : 8);
        op.stride = sz;
        op.min_cdr = sz;
      }
  }
  // Str/WStr tell the C layout from the C++ one by esize (0: C).
  if ((op.elem == Elem::Str || op.elem == Elem::WStr) && Tr::lang == Lang::Cpp) {
    op.esize = 1;
  }
  if (!mm.is_array_) {
    op.container = Container::Array;
    op.count = 1;
  } else if (mm.array_size_ != 0 && !mm.is_upper_bound_) {
    op.container = Container::Array;
    op.count = mm.array_size_;
  } else {
    op.bound = mm.is_upper_bound_ ? mm.array_size_ : 0;
    if (Tr::lang == Lang::C) {
      op.container = Container::SeqC;
    } else if (op.elem == Elem::Bool) {
      op.container = Container::BoolVecCpp;
    } else {
      // std::vector<unsigned char> is what rosidl's C++ generator makes of an unbounded uint8,
      // byte or char sequence.
      bool bytes = !mm.is_upper_bound_ &&
        (mm.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_UINT8 ||
        mm.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_OCTET ||
        mm.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_CHAR);
      op.container = bytes ? Container::BytesCpp : Container::SeqCpp;
      if (mm.get_const_function == nullptr || mm.get_function == nullptr) {
        set_error("rmw_ferry: sequence " + std::string(mm.name_) + " of " + t->name +
          " has no element access functions");
        return false;
      }
    }
    if (mm.size_function == nullptr || mm.resize_function == nullptr) {
      set_error("rmw_ferry: sequence " + std::string(mm.name_) + " of " + t->name +
        " has no size or resize function");
      return false;
    }
  }
  // The member function pointer types differ between C and C++; each language keeps its own.
  if constexpr (Tr::lang == Lang::C) {
    op.c_resize = mm.resize_function;
  } else {
    op.cpp_size = mm.size_function;
    op.cpp_get_const = mm.get_const_function;
    op.cpp_get = mm.get_function;
    op.cpp_resize = mm.resize_function;
  }
  t->ops.push_back(op);
  return true;
}

// CDR alignment of an op's element, for the flatness test (0: the op is not flat).
size_t flat_align(const Op & op)
{
  if (op.container != Container::Array) {
    return 0;
  }
  if (op.elem == Elem::Prim || op.elem == Elem::Bool) {
    return op.align;
  }
  if (op.elem == Elem::Msg && op.sub->flat) {
    return op.sub->align;
  }
  return 0;
}

// Where the CDR of a plain type that starts at offset pos ends: plain types have the same
// size whatever they hold.
size_t plain_cdr_end(const MessageType * t, size_t pos)
{
  if (t->flat && (pos & (t->align - 1)) == 0) {
    return pos + t->size_of;
  }
  for (const Op & op : t->ops) {
    if (op.elem == Elem::Msg) {
      for (size_t i = 0; i < op.count; i++) {
        pos = plain_cdr_end(op.sub, pos);
      }
    } else {
      pos = ((pos + op.align - 1) & ~static_cast<size_t>(op.align - 1)) + op.count * op.esize;
    }
  }
  return pos;
}

template<class Tr>
MessageType * build(Registry & r, const typename Tr::Members * m)
{
  auto it = r.by_members.find(m);
  if (it != r.by_members.end()) {
    return it->second.get();
  }
  auto t = std::make_unique<MessageType>();
  t->package = slash_namespace(m->message_namespace_);
  t->name = t->package + "/" + m->message_name_;
  t->package = t->package.substr(0, t->package.find('/'));
  t->lang = Tr::lang;
  t->size_of = m->size_of_;
  t->member_count = m->member_count_;
  if constexpr (Tr::lang == Lang::C) {
    t->c_init = m->init_function;
    t->c_fini = m->fini_function;
  } else {
    t->cpp_init = m->init_function;
    t->cpp_fini = m->fini_function;
  }
  t->canonical = t->name + "{";
  for (uint32_t i = 0; i < m->member_count_; i++) {
    const auto & mm = m->members_[i];
    const MessageType * sub = nullptr;
    if (mm.type_id_ == rosidl_typesupport_introspection_c__ROS_TYPE_MESSAGE) {
      if (mm.members_ == nullptr || mm.members_->data == nullptr) {
        set_error("rmw_ferry: field " + std::string(mm.name_) + " of " + t->name +
          " has no introspection");
        return nullptr;
      }
      sub = build<Tr>(r, members_of<Tr>(mm.members_));
      if (sub == nullptr) {
        return nullptr;
      }
    }
    t->fields.push_back(
      Field{mm.name_, mm.type_id_, mm.string_upper_bound_, mm.is_array_, mm.array_size_,
        mm.is_upper_bound_, sub});
    t->canonical += std::string(mm.name_) + ":" + std::to_string(mm.type_id_) + "/" +
      std::to_string(mm.string_upper_bound_) + "/" + (mm.is_array_ ? "a" : "s") +
      std::to_string(mm.array_size_) + (mm.is_upper_bound_ ? "b" : "") +
      (sub != nullptr ? "=" + sub->canonical : std::string()) + ";";
    if (sub != nullptr && !mm.is_array_) {
      // A single nested message: its ops join ours, their offsets moved by the field's.
      for (Op op : sub->ops) {
        op.offset += mm.offset_;
        t->ops.push_back(op);
      }
    } else if (!add_op<Tr>(t.get(), mm, sub)) {
      return nullptr;
    }
  }
  t->canonical += "}";
  t->hash = fnv1a(t->canonical);

  t->plain = true;
  t->flat = true;
  t->flat_read = true;
  t->align = 1;
  t->min_cdr = 0;
  size_t cdr_pos = 0;
  for (const Op & op : t->ops) {
    bool seq = op.container != Container::Array;
    if (seq || op.elem == Elem::Str || op.elem == Elem::WStr ||
      (op.elem == Elem::Msg && !op.sub->plain))
    {
      t->plain = false;
    }
    if (op.elem == Elem::Bool || (op.elem == Elem::Msg && !op.sub->flat_read)) {
      t->flat_read = false;
    }
    t->min_cdr += seq ? 4 : op.count * op.min_cdr;
    size_t a = flat_align(op);
    if (a == 0) {
      t->flat = false;
      continue;
    }
    if (a > t->align) {
      t->align = a;
    }
    // No padding at all: a copy would carry the memory's padding bytes where CDR has zeros.
    if ((cdr_pos & (a - 1)) != 0 || cdr_pos != op.offset) {
      t->flat = false;
    }
    cdr_pos += op.count * op.stride;
  }
  if (cdr_pos != t->size_of || t->size_of % t->align != 0 || t->ops.empty()) {
    t->flat = false;
  }
  t->flat_read = t->flat_read && t->flat;
  if (t->min_cdr == 0) {
    t->min_cdr = 1;
  }
  if (t->plain) {
    t->plain_cdr_size = 4 + (t->member_count == 0 ? 1 : plain_cdr_end(t.get(), 0));
  }
  t->definition = make_definition(t.get());
  MessageType * out = t.get();
  r.by_members.emplace(m, std::move(t));
  return out;
}

bool is_identifier(const char * a, const char * b)
{
  return a == b || (a != nullptr && std::strcmp(a, b) == 0);
}

}  // namespace

const MessageType * message_type_get(const rosidl_message_type_support_t * ts)
{
  if (ts == nullptr) {
    set_error("rmw_ferry: no type support");
    return nullptr;
  }
  Registry & r = registry();
  std::lock_guard<std::mutex> g(r.lock);
  auto it = r.by_handle.find({ts, ts->typesupport_identifier});
  if (it != r.by_handle.end()) {
    return it->second;
  }
  MessageType * t = nullptr;
  const rosidl_message_type_support_t * h = nullptr;
  if (is_identifier(ts->typesupport_identifier, tic::typesupport_identifier)) {
    h = ts;
  } else if (!is_identifier(
      ts->typesupport_identifier, rosidl_typesupport_introspection_c__identifier))
  {
    h = get_message_typesupport_handle(ts, tic::typesupport_identifier);
    // A failed lookup leaves an error message behind; the C lookup may still succeed.
    rcutils_reset_error();
  }
  if (h != nullptr) {
    t = build<CppTraits>(r, members_of<CppTraits>(h));
  } else {
    if (is_identifier(ts->typesupport_identifier, rosidl_typesupport_introspection_c__identifier)) {
      h = ts;
    } else {
      h = get_message_typesupport_handle(ts, rosidl_typesupport_introspection_c__identifier);
      rcutils_reset_error();
    }
    if (h == nullptr) {
      set_error(
        std::string("rmw_ferry: type support '") + ts->typesupport_identifier +
        "' offers neither C nor C++ introspection");
      return nullptr;
    }
    t = build<CTraits>(r, members_of<CTraits>(h));
  }
  if (t != nullptr) {
    r.by_handle.emplace(std::make_pair(ts, ts->typesupport_identifier), t);
  }
  return t;
}

bool service_types_get(
  const rosidl_service_type_support_t * ts, const MessageType ** request,
  const MessageType ** response)
{
  if (ts == nullptr) {
    set_error("rmw_ferry: no service type support");
    return false;
  }
  Registry & r = registry();
  std::lock_guard<std::mutex> g(r.lock);
  const rosidl_service_type_support_t * h = nullptr;
  if (is_identifier(ts->typesupport_identifier, tic::typesupport_identifier)) {
    h = ts;
  } else if (!is_identifier(
      ts->typesupport_identifier, rosidl_typesupport_introspection_c__identifier))
  {
    h = get_service_typesupport_handle(ts, tic::typesupport_identifier);
    rcutils_reset_error();
  }
  if (h != nullptr) {
    const auto * sm = static_cast<const tic::ServiceMembers *>(h->data);
    *request = build<CppTraits>(r, sm->request_members_);
    *response = build<CppTraits>(r, sm->response_members_);
  } else {
    if (is_identifier(ts->typesupport_identifier, rosidl_typesupport_introspection_c__identifier)) {
      h = ts;
    } else {
      h = get_service_typesupport_handle(ts, rosidl_typesupport_introspection_c__identifier);
      rcutils_reset_error();
    }
    if (h == nullptr) {
      set_error(
        std::string("rmw_ferry: service type support '") + ts->typesupport_identifier +
        "' offers neither C nor C++ introspection");
      return false;
    }
    const auto * sm = static_cast<const rosidl_typesupport_introspection_c__ServiceMembers *>(
      h->data);
    *request = build<CTraits>(r, sm->request_members_);
    *response = build<CTraits>(r, sm->response_members_);
  }
  return *request != nullptr && *response != nullptr;
}

const std::string & type_name(const MessageType * t) {return t->name;}
uint64_t type_hash(const MessageType * t) {return t->hash;}
bool is_plain(const MessageType * t) {return t->plain;}
size_t message_size(const MessageType * t) {return t->size_of;}
const std::string & definition(const MessageType * t) {return t->definition;}

namespace
{
constexpr bool host_little_endian()
{
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
}
}  // namespace

size_t cdr_size(const MessageType * t, const void * msg)
{
  if (t->plain) {
    return t->plain_cdr_size;
  }
  Out<false> o{nullptr, 0};
  write_struct<false>(t, static_cast<const uint8_t *>(msg), o);
  return 4 + o.pos;
}

void cdr_write(const MessageType * t, const void * msg, uint8_t * buf, size_t size)
{
  (void)size;
  buf[0] = 0x00;
  buf[1] = host_little_endian() ? 0x01 : 0x00;
  buf[2] = 0x00;
  buf[3] = 0x00;
  Out<true> o{buf + 4, 0};
  if (t->member_count == 0) {
    o.b[0] = 0;
    return;
  }
  write_struct<true>(t, static_cast<const uint8_t *>(msg), o);
}

bool cdr_read(const MessageType * t, const uint8_t * buf, size_t size, void * msg)
{
  if (size < 4 || buf[0] != 0x00 || buf[1] > 0x01) {
    set_error("rmw_ferry: not a CDR_LE or CDR_BE serialisation");
    return false;
  }
  In in{buf + 4, size - 4, 0, (buf[1] == 0x01) != host_little_endian()};
  if (t->member_count == 0) {
    return in.left() >= 1;
  }
  bool ok;
  try {
    ok = read_struct(t, in, static_cast<uint8_t *>(msg));
  } catch (const std::exception & e) {
    // std::bad_alloc from a resize: the lengths were checked, but memory may still run out.
    set_error(std::string("rmw_ferry: parsing ") + t->name + ": " + e.what());
    return false;
  }
  if (!ok) {
    set_error("rmw_ferry: malformed or truncated " + t->name);
  }
  return ok;
}

void message_init(const MessageType * t, void * msg)
{
  if (t->lang == Lang::C) {
    t->c_init(msg, ROSIDL_RUNTIME_C_MSG_INIT_ALL);
  } else {
    t->cpp_init(msg, rosidl_runtime_cpp::MessageInitialization::ALL);
  }
}

void message_fini(const MessageType * t, void * msg)
{
  if (t->lang == Lang::C) {
    t->c_fini(msg);
  } else {
    t->cpp_fini(msg);
  }
}

}  // namespace rmw_ferry
