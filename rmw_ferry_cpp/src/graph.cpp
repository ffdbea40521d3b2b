// The graph files of rmw_ferry (graph.hpp says how they work).
#include "graph.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "internal.hpp"

namespace rmw_ferry
{
namespace
{

constexpr const char * kFolder = ".ros2";
constexpr const char * kMagic = "ferry-ros2-graph";
constexpr size_t kFileMax = 4u << 20;  // a context's file: 4 MiB at most
constexpr size_t kFilesMax = 4096;  // files looked at per snapshot
constexpr size_t kPeersMax = 256;  // pidfds kept

uint64_t fnv(const char * p, size_t n)
{
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) {
    h ^= static_cast<uint8_t>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

int64_t time_ns(const rmw_time_t & t)
{
  if (t.sec >= static_cast<uint64_t>(INT64_MAX / 1000000000)) {
    return INT64_MAX;
  }
  return static_cast<int64_t>(t.sec * 1000000000ull + t.nsec);
}

rmw_time_t time_of(int64_t ns)
{
  rmw_time_t t;
  if (ns == INT64_MAX) {
    t = kDurationInfinite;
  } else {
    t.sec = static_cast<uint64_t>(ns / 1000000000);
    t.nsec = static_cast<uint64_t>(ns % 1000000000);
  }
  return t;
}

void put_entry(std::ostringstream & o, const GraphEntry & e)
{
  o << static_cast<char>(e.kind) << ' ' << e.id;
  if (e.kind == GraphEntry::node) {
    o << ' ' << e.ns << ' ' << e.name << '\n';
    return;
  }
  o << ' ' << e.node_id << ' ' << e.name << ' ' << e.type << ' ';
  char hex[2 * RMW_GID_STORAGE_SIZE + 1];
  for (size_t i = 0; i < RMW_GID_STORAGE_SIZE; i++) {
    snprintf(hex + 2 * i, 3, "%02x", e.gid[i]);
  }
  o << hex << ' ' << static_cast<int>(e.qos.history) << ' ' << e.qos.depth << ' ' <<
    static_cast<int>(e.qos.reliability) << ' ' << static_cast<int>(e.qos.durability) << ' ' <<
    time_ns(e.qos.deadline) << ' ' << time_ns(e.qos.lifespan) << ' ' <<
    static_cast<int>(e.qos.liveliness) << ' ' << time_ns(e.qos.liveliness_lease_duration) << '\n';
}

bool get_entry(const std::string & line, GraphEntry * e)
{
  std::istringstream in(line);
  char kind = 0;
  in >> kind >> e->id;
  switch (kind) {
    case GraphEntry::node:
      e->kind = GraphEntry::node;
      in >> e->ns >> e->name;
      return !in.fail() && !e->name.empty() && !e->ns.empty();
    case GraphEntry::publisher:
    case GraphEntry::subscription:
    case GraphEntry::service:
    case GraphEntry::client:
      break;
    default:
      return false;
  }
  e->kind = static_cast<GraphEntry::Kind>(kind);
  std::string hex;
  int history = 0, reliability = 0, durability = 0, liveliness = 0;
  int64_t deadline = 0, lifespan = 0, lease = 0;
  in >> e->node_id >> e->name >> e->type >> hex >> history >> e->qos.depth >> reliability >>
  durability >> deadline >> lifespan >> liveliness >> lease;
  if (in.fail() || hex.size() != 2 * RMW_GID_STORAGE_SIZE) {
    return false;
  }
  for (size_t i = 0; i < RMW_GID_STORAGE_SIZE; i++) {
    unsigned v = 0;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) {
      return false;
    }
    e->gid[i] = static_cast<uint8_t>(v);
  }
  // Values another process wrote: out-of-range enums read as unknown.
  e->qos.history = history >= 0 && history <= RMW_QOS_POLICY_HISTORY_UNKNOWN ?
    static_cast<rmw_qos_history_policy_t>(history) : RMW_QOS_POLICY_HISTORY_UNKNOWN;
  e->qos.reliability = reliability >= 0 && reliability <= RMW_QOS_POLICY_RELIABILITY_UNKNOWN ?
    static_cast<rmw_qos_reliability_policy_t>(reliability) : RMW_QOS_POLICY_RELIABILITY_UNKNOWN;
  e->qos.durability = durability >= 0 && durability <= RMW_QOS_POLICY_DURABILITY_UNKNOWN ?
    static_cast<rmw_qos_durability_policy_t>(durability) : RMW_QOS_POLICY_DURABILITY_UNKNOWN;
  e->qos.liveliness = liveliness >= 0 && liveliness <= RMW_QOS_POLICY_LIVELINESS_UNKNOWN ?
    static_cast<rmw_qos_liveliness_policy_t>(liveliness) : RMW_QOS_POLICY_LIVELINESS_UNKNOWN;
  e->qos.deadline = time_of(deadline < 0 ? 0 : deadline);
  e->qos.lifespan = time_of(lifespan < 0 ? 0 : lifespan);
  e->qos.liveliness_lease_duration = time_of(lease < 0 ? 0 : lease);
  return true;
}

// Reads one context's file: false when it is not a complete file of ours (torn, foreign).
bool read_file(int fd, int32_t * pid, std::string * enclave, std::vector<GraphEntry> * out)
{
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
    static_cast<size_t>(st.st_size) > kFileMax)
  {
    return false;
  }
  std::string buf(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = pread(fd, &buf[0], buf.size(), 0);
  if (n <= 0) {
    return false;
  }
  buf.resize(static_cast<size_t>(n));
  size_t eol = buf.find('\n');
  if (eol == std::string::npos) {
    return false;
  }
  char magic[32] = {};
  int version = 0;
  size_t len = 0;
  uint64_t hash = 0;
  if (sscanf(buf.c_str(), "%31s %d %zu %" SCNx64, magic, &version, &len, &hash) != 4 ||
    strcmp(magic, kMagic) != 0 || version != 1 || eol + 1 + len > buf.size() ||
    fnv(buf.data() + eol + 1, len) != hash)
  {
    return false;
  }
  std::istringstream body(buf.substr(eol + 1, len));
  std::string line;
  std::map<uint64_t, std::pair<std::string, std::string>> nodes;
  std::vector<GraphEntry> entries;
  while (std::getline(body, line)) {
    if (line.rfind("ctx ", 0) == 0) {
      std::istringstream in(line.substr(4));
      in >> *pid >> *enclave;
      continue;
    }
    GraphEntry e;
    if (!get_entry(line, &e)) {
      continue;
    }
    if (e.kind == GraphEntry::node) {
      nodes[e.id] = {e.ns, e.name};
    }
    entries.push_back(std::move(e));
  }
  for (auto & e : entries) {
    e.pid = *pid;
    e.enclave = *enclave;
    if (e.kind != GraphEntry::node) {
      auto it = nodes.find(e.node_id);
      if (it == nodes.end()) {
        continue;  // an endpoint of no node of the file: left out
      }
      e.ns = it->second.first;
      e.node_name = it->second.second;
    }
    out->push_back(std::move(e));
  }
  return true;
}

}  // namespace

Graph * Graph::open(const char * domain_dir, const std::string & enclave)
{
  std::unique_ptr<Graph> g(new (std::nothrow) Graph());
  if (!g) {
    set_error("out of memory");
    return nullptr;
  }
  g->enclave_ = enclave.empty() ? "/" : enclave;
  int domain_fd = ::open(domain_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (domain_fd < 0) {
    set_error("cannot open the domain directory %s: %s", domain_dir, strerror(errno));
    return nullptr;
  }
  // The folder is made 0700 like the domain directory, and checked to be ours after opening.
  if (mkdirat(domain_fd, kFolder, 0700) != 0 && errno != EEXIST) {
    set_error("cannot make %s/%s: %s", domain_dir, kFolder, strerror(errno));
    close(domain_fd);
    return nullptr;
  }
  g->dir_fd_ = openat(domain_fd, kFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(domain_fd);
  struct stat st;
  if (g->dir_fd_ < 0 || fstat(g->dir_fd_, &st) != 0 || st.st_uid != geteuid()) {
    set_error(
      "%s/%s is not a directory of this user (%s)", domain_dir, kFolder,
      g->dir_fd_ < 0 ? strerror(errno) : "another owner");
    return nullptr;
  }
  char name[64];
  snprintf(
    name, sizeof name, "%d.%016" PRIx64 ".graph", static_cast<int>(getpid()), random_id());
  g->file_name_ = name;
  // The file is made unnamed, locked and written, and only then given its name: a reader
  // removes a graph file nobody holds locked, so one that appeared before its lock could be
  // taken for a dead context's (or lose its lock to that reader) while its owner starts.
  g->file_fd_ = openat(g->dir_fd_, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (g->file_fd_ < 0 || flock(g->file_fd_, LOCK_EX | LOCK_NB) != 0) {
    set_error("cannot make the graph file %s: %s", name, strerror(errno));
    return nullptr;
  }
  g->inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (g->inotify_fd_ < 0 ||
    inotify_add_watch(
      g->inotify_fd_, (std::string(domain_dir) + "/" + kFolder).c_str(),
      IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR) < 0)
  {
    set_error("inotify on %s/%s: %s", domain_dir, kFolder, strerror(errno));
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> guard(g->lock_);
    if (!g->write_locked()) {
      return nullptr;
    }
  }
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", g->file_fd_);
  if (linkat(AT_FDCWD, self, g->dir_fd_, name, AT_SYMLINK_FOLLOW) != 0) {
    set_error("cannot name the graph file %s: %s", name, strerror(errno));
    return nullptr;
  }
  g->named_ = true;
  return g.release();
}

Graph::~Graph()
{
  if (file_fd_ >= 0) {
    if (named_) {
      unlinkat(dir_fd_, file_name_.c_str(), 0);
    }
    close(file_fd_);
  }
  for (auto & p : peers_) {
    close(p.second);
  }
  if (inotify_fd_ >= 0) {
    close(inotify_fd_);
  }
  if (dir_fd_ >= 0) {
    close(dir_fd_);
  }
}

bool Graph::write_locked()
{
  std::ostringstream body;
  body << "ctx " << getpid() << ' ' << enclave_ << '\n';
  for (const auto & e : entries_) {
    put_entry(body, e);
  }
  for (const auto & d : definitions_) {
    body << "D " << d.first << ' ' << d.second << '\n';
  }
  std::string b = body.str();
  char head[96];
  int n = snprintf(
    head, sizeof head, "%s 1 %zu %016" PRIx64 "\n", kMagic, b.size(), fnv(b.data(), b.size()));
  std::string all = std::string(head, static_cast<size_t>(n)) + b;
  if (all.size() > kFileMax) {
    set_error("the graph of this context is over %zu bytes", kFileMax);
    return false;
  }
  // In place, so that the file (and its lock) stays one for the context's life: a reader that
  // sees it half written finds the hash wrong and reads again.
  if (pwrite(file_fd_, all.data(), all.size(), 0) != static_cast<ssize_t>(all.size()) ||
    ftruncate(file_fd_, static_cast<off_t>(all.size())) != 0)
  {
    set_error("cannot write the graph file %s: %s", file_name_.c_str(), strerror(errno));
    return false;
  }
  return true;
}

bool Graph::add(const GraphEntry & e)
{
  std::lock_guard<std::mutex> guard(lock_);
  entries_.push_back(e);
  if (!write_locked()) {
    entries_.pop_back();
    return false;
  }
  return true;
}

bool Graph::add_definition(
  const std::string & type, uint64_t hash, const char * encoding, const std::string & text)
{
  std::lock_guard<std::mutex> guard(lock_);
  if (definitions_.count(type)) {
    return true;
  }
  char head[40];
  snprintf(head, sizeof head, "%016" PRIx64 " %s ", hash, encoding);
  std::string line = head;
  for (char c : text) {
    switch (c) {
      case '%': line += "%25"; break;
      case '\n': line += "%0A"; break;
      case '\r': line += "%0D"; break;
      case ' ': line += "%20"; break;
      default: line += c; break;
    }
  }
  definitions_[type] = line;
  if (!write_locked()) {
    definitions_.erase(type);
    return false;
  }
  return true;
}

void Graph::remove(uint64_t id)
{
  std::lock_guard<std::mutex> guard(lock_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->id == id) {
      entries_.erase(it);
      write_locked();
      return;
    }
  }
}

std::vector<GraphEntry> Graph::snapshot()
{
  std::vector<GraphEntry> out;
  std::vector<int32_t> pids;
  std::lock_guard<std::mutex> guard(lock_);
  int fd = dup(dir_fd_);
  DIR * d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) {
      close(fd);
    }
    return out;
  }
  rewinddir(d);  // the duplicate shares its offset with dir_fd_: where the last walk ended
  size_t seen = 0;
  while (struct dirent * de = readdir(d)) {
    if (++seen > kFilesMax) {
      break;
    }
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len < 7 || strcmp(de->d_name + len - 6, ".graph") != 0) {
      continue;
    }
    int f = openat(dir_fd_, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
      continue;
    }
    if (flock(f, LOCK_SH | LOCK_NB) == 0) {
      // Nobody holds it: its context died. The file is never replaced, so the name still
      // means this inode.
      unlinkat(dir_fd_, de->d_name, 0);
      close(f);
      continue;
    }
    int32_t pid = 0;
    std::string enclave;
    for (int attempt = 0; attempt < 8; attempt++) {
      std::vector<GraphEntry> entries;
      if (read_file(f, &pid, &enclave, &entries)) {
        out.insert(out.end(), entries.begin(), entries.end());
        if (pid != getpid()) {
          pids.push_back(pid);
        }
        break;
      }
    }
    close(f);
  }
  closedir(d);
  refresh_peers_locked(pids);
  return out;
}

void Graph::refresh_peers_locked(const std::vector<int32_t> & pids)
{
  std::map<int32_t, int> next;
  for (int32_t pid : pids) {
    if (next.count(pid) || next.size() >= kPeersMax) {
      continue;
    }
    auto it = peers_.find(pid);
    if (it != peers_.end()) {
      next[pid] = it->second;
      peers_.erase(it);
      continue;
    }
#ifdef SYS_pidfd_open
    int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pfd >= 0) {
      next[pid] = pfd;
    }
#endif
  }
  for (auto & p : peers_) {
    close(p.second);
  }
  peers_.swap(next);
}

void Graph::poll_fds(std::vector<pollfd> * out)
{
  std::lock_guard<std::mutex> guard(lock_);
  out->push_back({inotify_fd_, POLLIN, 0});
  for (auto & p : peers_) {
    out->push_back({p.second, POLLIN, 0});
  }
}

bool Graph::consume(const pollfd * fds, size_t n)
{
  bool changed = false;
  std::lock_guard<std::mutex> guard(lock_);
  for (size_t i = 0; i < n; i++) {
    if (!fds[i].revents) {
      continue;
    }
    if (fds[i].fd == inotify_fd_) {
      char buf[4096];
      while (read(inotify_fd_, buf, sizeof buf) > 0) {
      }
      changed = true;
      continue;
    }
    for (auto it = peers_.begin(); it != peers_.end(); ++it) {
      if (it->second == fds[i].fd) {
        // A peer process ended: its file goes with the next snapshot.
        close(it->second);
        peers_.erase(it);
        changed = true;
        break;
      }
    }
  }
  return changed;
}

}  // namespace rmw_ferry
