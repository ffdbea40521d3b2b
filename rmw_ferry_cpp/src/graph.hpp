// The ROS graph of a ferry domain: which nodes live, and their publishers, subscriptions,
// services and clients with types and QoS.
//
// Each rmw context keeps one file in the domain directory's ".ros2" folder (a name no topic
// directory can have), holds an exclusive flock on it for as long as it lives and rewrites it in
// place when its graph changes (a header with the body's length and hash lets a reader tell a
// torn read and read again). A reader takes every file whose lock is held; a file whose lock is
// free was left by a dead process and is removed by whoever finds it. Changes are seen through
// inotify on the folder, and a peer's death through a pidfd per peer process, so that graph
// guard conditions fire without any thread and without polling.
#ifndef RMW_FERRY_GRAPH_HPP
#define RMW_FERRY_GRAPH_HPP

#include <poll.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "rmw/types.h"

namespace rmw_ferry
{

struct GraphEntry
{
  enum Kind : char
  {
    node = 'N',
    publisher = 'P',
    subscription = 'S',
    service = 'V',
    client = 'C',
  };
  Kind kind = node;
  uint64_t id = 0;  // unique in its context
  uint64_t node_id = 0;  // endpoints: their node's id
  std::string name;  // node: its name; endpoint: its topic or service (ROS name)
  std::string ns;  // node: its namespace; endpoint: its node's (filled by snapshot)
  std::string node_name;  // endpoint: its node's name (filled by snapshot)
  std::string enclave;  // filled by snapshot: the context's
  std::string type;  // endpoint: "pkg/msg/Name" (services: "pkg/srv/Name")
  uint8_t gid[RMW_GID_STORAGE_SIZE] = {};
  rmw_qos_profile_t qos{};
  int32_t pid = 0;  // filled by snapshot
};

class Graph
{
public:
  // Opens (makes) the ".ros2" folder of the domain directory and this context's file.
  // nullptr with the rmw error set on failure.
  static Graph * open(const char * domain_dir, const std::string & enclave);
  ~Graph();

  // Adds an entry (its id is given by the caller) / removes one by id; the file is rewritten.
  bool add(const GraphEntry & e);
  // Records a message type's wire form and definition (ros2msg text) in the file, for tools
  // that decode or record the type without its type support (`ferry echo`, `ferry record`): a
  // line "D <type> <hash> <encoding> <text>", hash the ferry type hash in 16 hex digits,
  // encoding "cdr" or "plain", and in text '%', '\n', '\r' and ' ' written as %25, %0A, %0D and
  // %20. Kept while the context lives.
  bool add_definition(
    const std::string & type, uint64_t hash, const char * encoding, const std::string & text);
  void remove(uint64_t id);

  // Every live context's entries (this one's included), endpoints with their node's names.
  std::vector<GraphEntry> snapshot();

  // Descriptors that become readable when the graph may have changed: inotify on the folder and
  // one pidfd per peer process seen by the last snapshot. consume() reads what fired (pass the
  // poll results back) and says whether anything did.
  void poll_fds(std::vector<pollfd> * out);
  bool consume(const pollfd * fds, size_t n);

private:
  Graph() = default;
  bool write_locked();
  void refresh_peers_locked(const std::vector<int32_t> & pids);

  std::mutex lock_;
  int dir_fd_ = -1;
  int file_fd_ = -1;
  int inotify_fd_ = -1;
  std::string file_name_;
  bool named_ = false;  // linked into the folder under file_name_
  std::string enclave_;
  std::vector<GraphEntry> entries_;
  std::map<std::string, std::string> definitions_;  // type -> the rest of its D line
  std::map<int32_t, int> peers_;  // pid -> pidfd
};

}  // namespace rmw_ferry

#endif  // RMW_FERRY_GRAPH_HPP
