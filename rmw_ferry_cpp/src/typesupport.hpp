// Message types as rmw_ferry sees them: one description per ROS 2 message type, built from the
// type's introspection (C or C++), that serialises a message into CDR, parses CDR back into a
// message, and tells whether the type is plain (fixed size: no string and no sequence anywhere),
// which is what may be loaned.
//
// CDR here is what rmw_cyclonedds_cpp writes (XCDR1, little-endian, the 4-byte encapsulation
// header {0x00, 0x01, 0x00, 0x00} in front, alignment counted from the byte after the header, 8
// at most), so that `ros2 bag`, `ferry record` and DDS peers read the same bytes.
//
// Every buffer parsed comes from another process (a publisher's shared pages, which it can still
// change while they are read): each length is read once, checked against what is left before any
// allocation, and a malformed buffer gives false, never a crash or an allocation larger than the
// buffer could describe.
#ifndef RMW_FERRY_TYPESUPPORT_HPP
#define RMW_FERRY_TYPESUPPORT_HPP

#include <cstddef>
#include <cstdint>
#include <string>

#include "rosidl_runtime_c/message_type_support_struct.h"
#include "rosidl_runtime_c/service_type_support_struct.h"

namespace rmw_ferry
{

/// One message type (opaque). Descriptions live as long as the process: they are built once
/// per type support handle and cached (thread-safe).
struct MessageType;

/// The description of a message type support handle, whichever of the C or C++ introspection
/// type supports it offers (resolved through get_message_typesupport_handle, C++ first).
/// nullptr (with rmw_set_error_string) when it offers neither.
const MessageType * message_type_get(const rosidl_message_type_support_t * ts);

/// The request and response types of a service type support handle; false (with
/// rmw_set_error_string) when it offers no introspection.
bool service_types_get(
  const rosidl_service_type_support_t * ts, const MessageType ** request,
  const MessageType ** response);

/// "package/msg/Name" (or "package/srv/Name_Request", as the introspection names it).
const std::string & type_name(const MessageType * t);

/// A hash of the type's structure (every field's name, type, array kind and bound, nested types
/// by their structure): the same for the C and the C++ introspection of one definition, different
/// when the definitions differ. Two ends with different hashes must not be matched.
uint64_t type_hash(const MessageType * t);

/// True when the type has no string, wstring or sequence (bounded or not) at any depth: its
/// in-memory representation is its size_of bytes and the same in C and in C++, so it can be
/// loaned and sent as it lies in memory.
bool is_plain(const MessageType * t);

/// sizeof the message structure (the introspection's size_of_).
size_t message_size(const MessageType * t);

/// The type's definition in ROS 2's .msg syntax, as rosbag2 and MCAP's ros2msg schema encoding
/// store it: the type's fields, then every type it uses once each, each after a line of 80 '='
/// and "MSG: package/msg/Name". Field types as in .msg (uint8[] data, string<=10 name,
/// float64[9] k, geometry_msgs/Vector3 linear).
const std::string & definition(const MessageType * t);

/// Bytes of the CDR serialisation of msg, the 4-byte header included.
size_t cdr_size(const MessageType * t, const void * msg);

/// Writes msg's serialisation into buf, which holds exactly cdr_size(t, msg) bytes. Bulk arrays
/// and sequences of primitives are copied with one memcpy each.
void cdr_write(const MessageType * t, const void * msg, uint8_t * buf, size_t size);

/// Parses a serialisation (CDR_LE or CDR_BE) into msg, an initialised message of the type
/// (its strings and sequences are resized as needed; the C and C++ representations alike).
/// False for a malformed or truncated buffer or another encapsulation; msg is then still a
/// valid message (it may hold part of the data), to be finalised as usual.
bool cdr_read(const MessageType * t, const uint8_t * buf, size_t size, void * msg);

/// Constructs (init_function, ALL) and destroys (fini_function) a message of the type in memory
/// the caller provides (message_size bytes, suitably aligned).
void message_init(const MessageType * t, void * msg);
void message_fini(const MessageType * t, void * msg);

}  // namespace rmw_ferry

#endif  // RMW_FERRY_TYPESUPPORT_HPP
