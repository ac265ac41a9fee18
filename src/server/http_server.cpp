#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace ember::server {

namespace {

// Linux caps this at net.core.somaxconn (4096 by default).
constexpr int kListenBacklog = 1024;

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// Waits for `events` on sock for up to timeout_ms; true when they (or an error) arrived.
bool wait_socket(socket_t sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

// One connection's byte stream, kept across its keep-alive requests (so pipelined bytes that
// were read ahead are not lost). httplib reads request lines a byte at a time, hence the buffer.
class SocketConnection : public httplib::Stream {
 public:
  SocketConnection(socket_t sock, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override { return buffered() > 0 || wait_socket(sock_, POLLIN, read_timeout_ms_); }
  bool is_writable() const override { return wait_socket(sock_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered() == 0) {
      if (!wait_socket(sock_, POLLIN, read_timeout_ms_)) return -1;
      ssize_t n;
      do {
        n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, buffered());
    std::memcpy(ptr, buf_.data() + begin_, k);
    begin_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_socket(sock_, POLLOUT, write_timeout_ms_)) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) address_of(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) address_of(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

  size_t buffered() const { return end_ - begin_; }

 private:
  socket_t sock_;
  int read_timeout_ms_, write_timeout_ms_;
  std::array<char, 16384> buf_{};
  size_t begin_ = 0, end_ = 0;
};

}  // namespace

HttpServer::HttpServer(size_t n_threads) {
  new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound < 0) return Status::errorf("cannot listen on {}:{}", host, port);
  // httplib listens with a backlog of 5; listen() again on the same socket raises it.
  ::listen(svr_sock_, kListenBacklog);
  return bound;
}

bool HttpServer::serve() { return listen_after_bind(); }

bool HttpServer::wait_for_request(socket_t sock) const {
  if (closing_) return false;
  return wait_socket(sock, POLLIN, static_cast<int>(keep_alive_timeout_sec_ * 1000));
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  bool registered = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closing_) {
      connections_[std::this_thread::get_id()] = Connection{sock};
      registered = true;
    }
  }
  bool ok = false;
  if (registered) {
    SocketConnection conn(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                          to_ms(write_timeout_sec_, write_timeout_usec_));
    Connection* self = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      self = &connections_[std::this_thread::get_id()];  // node-based map: stays valid
    }
    const auto request_start = [this](httplib::Request&) {
      if (on_request_start) on_request_start();
    };
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      if (conn.buffered() == 0 && !wait_for_request(sock)) break;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (closing_) break;
        self->busy = true;
      }
      bool connection_closed = false;
      ok = process_request(conn, /*close_connection=*/left == 1 || closing_, connection_closed, request_start);
      std::lock_guard<std::mutex> lock(mu_);
      self->busy = false;
      if (!ok || connection_closed || self->close_after_response) break;
    }
    // Unregister before closing, under the lock, so close_connections() never touches a
    // descriptor number that may already belong to another connection.
    std::lock_guard<std::mutex> lock(mu_);
    connections_.erase(std::this_thread::get_id());
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

bool HttpServer::client_gone() const {
  socket_t sock = INVALID_SOCKET;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(std::this_thread::get_id());
    if (it == connections_.end()) return false;
    sock = it->second.sock;
  }
  // The calling thread owns this connection, so the descriptor stays valid while we poll it.
  pollfd p{sock, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    // Readable without RDHUP: a pipelined request, or EOF where RDHUP is not reported.
    char c;
    return ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

void HttpServer::stop_accepting() {
  // Shutting the listening socket down wakes the accept loop, which closes it and then waits
  // for the workers; svr_sock_ keeps its value so in-flight chunked responses are not cut.
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::shutdown(s, SHUT_RDWR);
}

void HttpServer::close_connections() {
  // Chunked writers check svr_sock_ against INVALID_SOCKET.
  svr_sock_ = INVALID_SOCKET;
  std::lock_guard<std::mutex> lock(mu_);
  closing_ = true;
  // Idle keep-alive connections wait for their next request; shutting them down ends the wait.
  // Busy ones are writing an answer: they close once it is out.
  for (auto& [tid, c] : connections_)
    if (!c.busy) ::shutdown(c.sock, SHUT_RDWR);
}

void HttpServer::close_after_response(httplib::Response& res) {
  res.set_header("Connection", "close");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(std::this_thread::get_id());
  if (it != connections_.end()) it->second.close_after_response = true;
}

}  // namespace ember::server
