// SPDX-License-Identifier: BSL-1.0
// doorbell: wake-ups across processes for a provider whose completion queue has no wait object
// that peers signal (libfabric 1.17's shm: a peer writes into our shared region and nothing
// tells a sleeping process). Each endpoint owns a bell: a word in a small shared-memory object
// that says "a worker of this process is about to block", and a datagram socket in the
// abstract namespace whose fd the scheduler polls with its own. A sender that has posted to a
// peer rings that peer's bell only when the word is raised (one load per send otherwise), and
// lowers it, so a sleep costs at most one datagram.
//
// Protocol (a Dekker pair): the sleeper raises its word, then checks for work (progress());
// a sender posts, then reads the word. With a full fence on each side, either the sleeper sees
// the message or the sender sees the word and rings. A peer whose word or socket cannot be
// reached (another host, or another network namespace over a shared /dev/shm) is counted
// missing by connect() and never rung; the transport then takes it that the peer cannot ring
// this side either and reports its wait fd's coverage as partial (short sleeps). Otherwise a
// ring is missed only on a fault (one side alone failing to open the other's bell, for want
// of file descriptors or memory), and the scheduler's lengthening safety-net sleep covers it.
//
// Thread safety: arm/disarm/ring may run on any thread. Names: "/NAME-bell" in /dev/shm (NAME
// is the endpoint's shm name, so courier-run's cleanup of a killed job's names covers it) and
// "@courier-bell-NAME" for the socket. The destructor removes the shared object; a process
// ended by a signal or by remove_shared_memory_files() and std::_Exit removes it too
// (shm_files.hpp).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace courier::parcelport::detail {

class doorbell {
public:
    /// This endpoint's bell. Throws std::system_error when the shared object or the socket
    /// cannot be made.
    explicit doorbell(std::string const& name);
    ~doorbell();
    doorbell(doorbell const&) = delete;
    doorbell& operator=(doorbell const&) = delete;

    /// The name peers open this bell by.
    std::string const& name() const noexcept { return name_; }
    /// Readable when a peer rang.
    int fd() const noexcept { return fd_; }
    /// Opens the peers' bells by name (an empty name: that rank has none). Returns how many
    /// could not be opened (those ranks are never rung).
    std::size_t connect(std::vector<std::string> const& names);

    /// Before sleeping: drops old rings and raises this endpoint's word. The caller must then
    /// look for work, and disarm() if it finds some.
    void arm() noexcept;
    /// Lowers the word (after waking, or when work was found).
    void disarm() noexcept;
    /// After posting something `rank` will receive: wakes it if it is about to sleep or
    /// sleeps. True if a datagram was sent.
    bool ring(std::uint32_t rank) noexcept;

private:
    struct page {
        std::atomic<std::uint32_t> sleeping;
    };
    struct peer {
        page* p = nullptr;
        sockaddr_un addr{};
        socklen_t len = 0;
    };
    static void socket_address(std::string const& name, sockaddr_un& a, socklen_t& len);

    std::string name_;
    std::string shm_path_;
    page* own_ = nullptr;
    int fd_ = -1;
    std::vector<peer> peers_;
};

} // namespace courier::parcelport::detail
