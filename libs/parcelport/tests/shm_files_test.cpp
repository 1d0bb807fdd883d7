// SPDX-License-Identifier: BSL-1.0
// A process that ends without closing its shm transport leaves nothing in /dev/shm: neither
// the endpoint's region nor its doorbell, whether a signal ends it (as mpirun or srun end the
// rest of a failed job, with SIGTERM) or it calls remove_shared_memory_files() and std::_Exit
// (as a locality that ends at once does). Each case runs in a forked child.
#include <courier/parcelport/transport.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace pp = courier::parcelport;

namespace {

constexpr int ends_itself = 0; // the child removes its files and calls std::_Exit(0)
constexpr int unavailable = 77;

std::string unique_name() {
    return "courier-test-files-" + std::to_string(::getpid()) + "-" +
           std::to_string(std::random_device{}());
}

bool exists(std::string const& name) {
    return std::filesystem::exists("/dev/shm/" + name);
}

// A child opens a shm transport named `name` (with its doorbell), says so on the pipe, and
// then waits for `how` (a signal from the parent, or ends_itself).
pid_t start_child(std::string const& name, int how, int& ready) {
    int fds[2];
    if (::pipe(fds) != 0) {
        return -1;
    }
    pid_t child = ::fork();
    if (child == 0) {
        ::close(fds[0]);
        rlimit no_core{0, 0}; // SIGABRT and SIGQUIT would dump one
        ::setrlimit(RLIMIT_CORE, &no_core);
        std::unique_ptr<pp::transport> t;
        try {
            pp::transport_options o;
            o.provider = "shm";
            o.endpoint_name = name;
            t = pp::make_libfabric_transport(o);
        } catch (std::exception const&) {
            ::_exit(unavailable);
        }
        char one = 1;
        if (::write(fds[1], &one, 1) != 1) {
            ::_exit(2);
        }
        if (how == ends_itself) {
            pp::remove_shared_memory_files();
            std::_Exit(0);
        }
        for (;;) {
            ::pause();
        }
    }
    ::close(fds[1]);
    ready = fds[0];
    return child;
}

class shm_files : public ::testing::TestWithParam<int> {};

TEST_P(shm_files, a_process_ended_without_closing_its_transport_leaves_none) {
    int how = GetParam();
    std::string name = unique_name();
    int ready = -1;
    pid_t child = start_child(name, how, ready);
    ASSERT_GT(child, 0);
    char one = 0;
    bool opened = ::read(ready, &one, 1) == 1;
    ::close(ready);
    if (opened && how != ends_itself) {
        EXPECT_TRUE(exists(name));
        EXPECT_TRUE(exists(name + "-bell"));
        EXPECT_TRUE(exists(name + "-rings"));
        ::kill(child, how);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == unavailable) {
        GTEST_SKIP() << "provider shm unavailable here";
    }
    ASSERT_TRUE(opened);
    // Ended as before the handler was there: by the signal, or by a handler libfabric
    // installed (its psm3 provider prints a backtrace and exits 1 on SIGTERM, SIGINT, SIGABRT).
    if (how == ends_itself) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    } else {
        EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0))
            << status;
    }
    EXPECT_FALSE(exists(name)) << "the endpoint's region stayed";
    EXPECT_FALSE(exists(name + "-bell")) << "the doorbell stayed";
    EXPECT_FALSE(exists(name + "-rings")) << "the message rings stayed";
    std::filesystem::remove("/dev/shm/" + name);
    std::filesystem::remove("/dev/shm/" + name + "-bell");
    std::filesystem::remove("/dev/shm/" + name + "-rings");
}

INSTANTIATE_TEST_SUITE_P(endings, shm_files,
                         ::testing::Values(ends_itself, SIGTERM, SIGINT, SIGHUP, SIGABRT),
                         [](::testing::TestParamInfo<int> const& i) -> std::string {
                             switch (i.param) {
                             case ends_itself:
                                 return "removed_then_Exit";
                             case SIGTERM:
                                 return "SIGTERM";
                             case SIGINT:
                                 return "SIGINT";
                             case SIGHUP:
                                 return "SIGHUP";
                             default:
                                 return "SIGABRT";
                             }
                         });

} // namespace
