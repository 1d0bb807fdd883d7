// SPDX-License-Identifier: BSL-1.0
// courier-run -n N [--hosts=A,B[:K] | --hostfile=FILE [--agent=CMD]] [-x NAME[=VALUE] ...]
//             [--courier:OPTION=VALUE ...] PROGRAM [ARGS ...]
//
// Starts N localities of PROGRAM and runs their rendezvous: each locality connects to a TCP
// socket of courier-run, sends {rank, transport address}, and receives the job token and every
// locality's address. The --courier: options given before PROGRAM are passed to every
// locality. Without --hosts/--hostfile every locality runs on this machine (forked, the
// rendezvous on loopback). With them, each locality is started on its host by the agent as
// `CMD HOST sh-command` (default CMD: ssh), whose command line carries everything the
// locality needs (the environment is not inherited, as with ssh): `cd DIR; exec env
// COURIER_...=... PROGRAM ARGS`, every word shell-quoted. That line also carries the caller's
// own COURIER_* and FI_* variables (the runtime's and libfabric's settings: a locality on
// another host runs as configured as one here) and every variable named with -x NAME (its
// value here) or -x NAME=VALUE (that value, on one host too), as mpirun's -x. The rendezvous then
// listens on every interface and the localities are told the address of this machine that routes to
// the first host (--courier-run-address=IP to choose). Their output comes back through pipes as
// whole lines prefixed with the rank ("[3] ..."). Exit status: 0 when every locality finished the
// job (it says so on its rendezvous connection just before it exits) and exits 0; otherwise the
// first failing locality's status (128 + signal for a signal; 255 from ssh: the host could not be
// reached), after the others were stopped (SIGTERM and SIGCONT, then SIGKILL after 5 s). A locality
// that exits with status 0 without joining the job (not a Courier program) or before finishing it
// (std::exit inside the program) fails it with status 1, noticed at once. A locality that declines
// to join because it has nothing to run (--courier:help: locality 0 prints the help) is no failure;
// when every locality declines, courier-run exits 0. Interrupted (SIGINT, SIGTERM), courier-run
// stops the job and exits 128 + the signal, blaming no locality for the stop it made itself. Never
// waits forever: a locality that does not check in within --courier-run-timeout seconds (default
// 60) fails the job. The rendezvous sockets stay open: when a locality fails, the others are
// told at once (their futures on it then fail with courier::network_error) and get
// --courier:peer_timeout seconds (default 5) to finish before the job is stopped.
// --courier-run-job-timeout=S (default 0: none) bounds the whole job: when it runs out, every
// locality is asked to log what it is waiting for, then the job is stopped and courier-run
// exits 124. Shared-memory endpoints are named courier-JOBID-RANK (COURIER_JOB_ID); whatever a
// killed locality left in this machine's /dev/shm is removed at the end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hosts.hpp"
#include "output.hpp"

#include <courier/common/fd_io.hpp>

#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

int usage() {
    std::fprintf(stderr,
                 "usage: courier-run -n N [--hosts=A,B[:K] | --hostfile=FILE] [--agent=CMD]\n"
                 "                   [-x NAME[=VALUE] ...]\n"
                 "                   [--courier-run-address=IP] [--courier-run-timeout=S]\n"
                 "                   [--courier-run-job-timeout=S] [--courier:OPTION=VALUE ...]\n"
                 "                   PROGRAM [ARGS ...]\n");
    return 2;
}

std::vector<pid_t> g_children;
volatile sig_atomic_t g_interrupted = 0;

void on_signal(int sig) {
    g_interrupted = sig;
}

void stop_all(int sig) {
    for (pid_t p : g_children) {
        if (p > 0) {
            ::kill(p, sig);
            if (sig == SIGTERM) {
                ::kill(p, SIGCONT); // a stopped locality handles SIGTERM only once continued
            }
        }
    }
}

/// This machine's address from which `host` is reached (a UDP connect() looks the route up
/// and sends nothing); empty if the host cannot be resolved.
std::string address_toward(std::string const& host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) {
        return {};
    }
    std::string out;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    socklen_t len = sizeof from;
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len) == 0) {
        char buf[INET_ADDRSTRLEN];
        if (::inet_ntop(AF_INET, &from.sin_addr, buf, sizeof buf) != nullptr) {
            out = buf;
        }
    }
    if (fd >= 0) {
        ::close(fd);
    }
    ::freeaddrinfo(res);
    return out;
}

std::vector<std::string> split_words(std::string const& s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') {
            ++i;
        }
        std::size_t j = s.find(' ', i);
        if (j == std::string::npos) {
            j = s.size();
        }
        if (j > i) {
            out.push_back(s.substr(i, j - i));
        }
        i = j;
    }
    return out;
}

std::vector<std::string> g_host_of; // by rank; empty: every locality on this machine

using courier::io::read_all;
using courier::io::write_all;

// Every locality has exited: what is left in /dev/shm under this job's names was left by a
// killed one (a clean exit removes its own).
void remove_shared_memory_leftovers(char const* job_id) {
    std::error_code ec;
    std::string prefix = std::string("courier-") + job_id + "-";
    for (auto const& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
        if (e.path().filename().string().rfind(prefix, 0) == 0) {
            std::filesystem::remove(e.path(), ec);
        }
    }
}

int status_code(int status) {
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return 1;
}

using steady = std::chrono::steady_clock;

// The rendezvous protocol (bootstrap.cpp is the other side): a locality checks in with
// {u32 rank, u32 address length} and its address, or declines with the length
// declined_length; once the job is done it sends {finished_word, 0} before it exits.
constexpr std::uint32_t declined_length = 0xffffffffu;
constexpr std::uint32_t finished_word = 1;

/// What courier-run knows of each locality, by rank.
struct locality_record {
    bool declined = false; ///< checked in to say it has nothing to run (--courier:help)
    bool finished = false; ///< said it went through the job's shutdown (just before exiting)
    /// Exited with status 0, neither declined nor finished so far: its last words may still be
    /// on the way. Judged a failure once they are known not to come, or at `judge_by`.
    bool unjudged = false;
    steady::time_point judge_by;
};
std::vector<locality_record> g_record;

// The job failed because of locality `rank`: the first failure sets the status and is named.
void job_failed(int& first_failure, std::size_t rank, int code, std::string const& what) {
    if (first_failure != 0) {
        return;
    }
    first_failure = code;
    std::string where = g_host_of.empty() ? "" : " on host " + g_host_of[rank];
    std::fprintf(stderr, "courier-run: locality %zu%s %s; stopping the job\n", rank, where.c_str(),
                 what.c_str());
}

// Reaps finished children. A non-zero status fails the job; a zero status is no failure only
// for a locality that finished the job (or declined to join it): whether it did may be known
// only a little later (judge()). Nothing is blamed once courier-run was interrupted: it stops
// the localities itself then.
void reap(std::size_t& alive, int& first_failure) {
    int status = 0;
    pid_t p;
    while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
        for (std::size_t i = 0; i < g_children.size(); ++i) {
            if (g_children[i] != p) {
                continue;
            }
            g_children[i] = -1;
            --alive;
            int code = status_code(status);
            if (g_interrupted != 0) {
                continue;
            }
            if (code != 0) {
                char const* why = "";
                if (!g_host_of.empty() && code == 255) {
                    why = " (the agent could not reach the host?)";
                } else if (code == 127) {
                    why = " (command not found)";
                }
                job_failed(first_failure, i, code,
                           "failed (status " + std::to_string(code) + why + ")");
            } else if (!g_record[i].finished && !g_record[i].declined) {
                g_record[i].unjudged = true;
                g_record[i].judge_by = steady::now() + std::chrono::seconds(1);
            }
        }
    }
}

// Localities that exited with status 0 and did not say they finished or declined: a failure
// once `gone_silent(rank)` (nothing more can come from it) or their time is up.
template <class Joined, class Silent>
void judge(int& first_failure, Joined joined, Silent gone_silent) {
    for (std::size_t i = 0; i < g_record.size(); ++i) {
        auto& r = g_record[i];
        if (!r.unjudged) {
            continue;
        }
        if (r.finished || r.declined) {
            r.unjudged = false;
        } else if (gone_silent(i) || steady::now() >= r.judge_by) {
            r.unjudged = false;
            job_failed(first_failure, i, 1,
                       joined(i) ? "exited with status 0 before the job finished (std::exit "
                                   "or std::_Exit before courier::init returned?)"
                                 : "exited with status 0 without joining the job (not a "
                                   "Courier program, or it ended before courier::init?)");
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    long n = 0;
    int timeout_s = 60;
    int job_timeout_s = 0;
    int grace_s = 5;
    if (char const* e = std::getenv("COURIER_PEER_TIMEOUT")) {
        grace_s = std::atoi(e);
    }
    std::vector<std::string> courier_opts;
    std::vector<std::string> exported; // -x: NAME=VALUE
    std::string hosts_arg, hostfile, agent = "ssh", address;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&](char const* prefix) -> bool { return a.rfind(prefix, 0) == 0; };
        if (a == "-n" && i + 1 < argc) {
            n = std::strtol(argv[++i], nullptr, 10);
        } else if (a.rfind("-n", 0) == 0 && a.size() > 2) {
            n = std::strtol(a.c_str() + 2, nullptr, 10);
        } else if (a == "-x") {
            std::string e = i + 1 < argc ? argv[++i] : "";
            if (e.empty() || e[0] == '=') {
                std::fprintf(stderr, "courier-run: -x needs NAME or NAME=VALUE\n");
                return usage();
            }
            if (e.find('=') == std::string::npos) {
                char const* v = std::getenv(e.c_str());
                if (v == nullptr) {
                    std::fprintf(stderr, "courier-run: -x %s: no such variable here\n", e.c_str());
                    return 2;
                }
                e += "=" + std::string(v);
            }
            exported.push_back(std::move(e));
        } else if (value("--courier-run-timeout=")) {
            timeout_s = std::atoi(a.c_str() + 22);
        } else if (value("--courier-run-job-timeout=")) {
            job_timeout_s = std::atoi(a.c_str() + 26);
        } else if (value("--courier-run-address=")) {
            address = a.substr(22);
        } else if (value("--hosts=")) {
            hosts_arg = a.substr(8);
        } else if (value("--hostfile=")) {
            hostfile = a.substr(11);
        } else if (value("--agent=")) {
            agent = a.substr(8);
        } else if (value("--courier:")) {
            courier_opts.push_back(a);
            if (value("--courier:peer_timeout=")) {
                grace_s = std::atoi(a.c_str() + 23);
            }
        } else if (a == "--help" || a == "-h") {
            usage();
            return 0;
        } else if (a.rfind("--", 0) == 0) {
            std::fprintf(stderr, "courier-run: unknown option %s\n", a.c_str());
            return usage();
        } else {
            break;
        }
    }
    if (n < 1 || n > 4096 || i >= argc) {
        return usage();
    }
    std::vector<std::string> agent_words = split_words(agent);
    try {
        if (!hosts_arg.empty() && !hostfile.empty()) {
            throw courier::run::usage_error("give --hosts or --hostfile, not both");
        }
        if (!hosts_arg.empty() || !hostfile.empty()) {
            auto entries = hostfile.empty() ? courier::run::parse_host_list(hosts_arg)
                                            : courier::run::parse_host_file(hostfile);
            g_host_of = courier::run::place(entries, n);
            if (agent_words.empty()) {
                throw courier::run::usage_error("--agent: empty command");
            }
        }
    } catch (courier::run::usage_error const& e) {
        std::fprintf(stderr, "courier-run: %s\n", e.what());
        return 2;
    }
    bool across_hosts = !g_host_of.empty();
    // Per host: how many localities it runs, and each locality's place among them.
    std::map<std::string, std::uint32_t> on_host;
    std::vector<std::uint32_t> local_rank(static_cast<std::size_t>(n), 0);
    for (long r = 0; r < n; ++r) {
        auto const& h = across_hosts ? g_host_of[static_cast<std::size_t>(r)] : std::string();
        local_rank[static_cast<std::size_t>(r)] = on_host[h]++;
    }
    if (across_hosts && address.empty()) {
        address = address_toward(g_host_of[0]);
        if (address.empty()) {
            std::fprintf(stderr,
                         "courier-run: cannot resolve host '%s' (or no route to it); give its "
                         "address, or --courier-run-address=IP\n",
                         g_host_of[0].c_str());
            return 1;
        }
    }
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(across_hosts ? INADDR_ANY : INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(lfd, static_cast<int>(n)) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
        std::fprintf(stderr, "courier-run: cannot open the rendezvous socket: %s\n",
                     std::strerror(errno));
        return 1;
    }
    std::string endpoint = (across_hosts ? address : std::string("127.0.0.1")) + ":" +
                           std::to_string(ntohs(sa.sin_port));
    std::uint64_t token = std::random_device{}();
    token = (token << 32) ^ std::random_device{}();
    if (token == 0) {
        token = 1;
    }
    char job_id[17];
    std::snprintf(job_id, sizeof job_id, "%016llx",
                  static_cast<unsigned long long>(std::random_device{}()) << 32 |
                      std::random_device{}());

    ::signal(SIGPIPE, SIG_IGN); // a locality that exited closes its socket: not our death
    struct sigaction act {};
    act.sa_handler = on_signal;
    ::sigaction(SIGINT, &act, nullptr);
    ::sigaction(SIGTERM, &act, nullptr);

    // A remote command starts in the agent's directory: it goes to this one first (if that
    // exists there), and a relative program path is made absolute.
    std::string cwd = std::filesystem::current_path().string();
    std::string program = argv[i];
    if (across_hosts && program.find('/') != std::string::npos && program[0] != '/') {
        program = std::filesystem::absolute(program).lexically_normal().string();
    }
    // Across hosts, the caller's COURIER_* and FI_* settings travel on the command line (the
    // agent starts a clean environment); on one host the localities inherit them anyway.
    std::vector<std::string> forwarded;
    if (across_hosts) {
        for (char** e = environ; *e != nullptr; ++e) {
            std::string_view v = *e;
            if (v.find('=') != std::string_view::npos &&
                (v.rfind("COURIER_", 0) == 0 || v.rfind("FI_", 0) == 0)) {
                forwarded.emplace_back(v);
            }
        }
    }
    courier::run::output_forwarder output;
    for (long r = 0; r < n; ++r) {
        auto const& host = across_hosts ? g_host_of[static_cast<std::size_t>(r)] : std::string();
        // Everything a locality needs, as VAR=VALUE words.
        std::vector<std::string> env = {
            "COURIER_RUN_ENDPOINT=" + endpoint,
            "COURIER_RANK=" + std::to_string(r),
            "COURIER_SIZE=" + std::to_string(n),
            "COURIER_JOB_ID=" + std::string(job_id),
            // The localities of one host share its cores (see --courier:threads).
            "COURIER_LOCAL_RANK=" + std::to_string(local_rank[static_cast<std::size_t>(r)]),
            "COURIER_LOCAL_SIZE=" + std::to_string(on_host[host]),
            "COURIER_HOST=" + (across_hosts ? host : std::string("localhost")),
            "COURIER_HOST_COUNT=" + std::to_string(on_host.size()),
            // libfabric's psm provider links libinfinipath, whose constructor installs
            // handlers for SIGTERM, SIGSEGV, ... that write *.btr files and call exit(): a
            // stopped locality would then run static destructors instead of dying. As OpenMPI
            // does, turn that off unless the user asked for it.
            "IPATH_NO_BACKTRACE=1",
            "HFI_NO_BACKTRACE=1",
        };
        // Whatever the caller's environment and -x add go first: courier-run's own values,
        // later on the env line and set last here, win (IPATH_/HFI_ are only defaults).
        std::vector<std::string> passed = forwarded;
        passed.insert(passed.end(), exported.begin(), exported.end());
        auto passed_by_caller = [&](std::string const& e) {
            auto name = e.substr(0, e.find('=') + 1);
            return std::any_of(passed.begin(), passed.end(),
                               [&](std::string const& p) { return p.rfind(name, 0) == 0; });
        };
        std::erase_if(env, [&](std::string const& e) {
            return (e.rfind("IPATH_", 0) == 0 || e.rfind("HFI_", 0) == 0) && passed_by_caller(e);
        });
        env.insert(env.begin(), passed.begin(), passed.end());
        std::vector<std::string> words{program}; // the locality's command
        for (auto& o : courier_opts) {
            words.push_back(o);
        }
        for (int k = i + 1; k < argc; ++k) {
            words.push_back(argv[k]);
        }
        int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
        if (across_hosts &&
            (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
            std::fprintf(stderr, "courier-run: pipe failed: %s\n", std::strerror(errno));
            stop_all(SIGKILL);
            return 1;
        }
        pid_t p = ::fork();
        if (p < 0) {
            std::fprintf(stderr, "courier-run: fork failed: %s\n", std::strerror(errno));
            stop_all(SIGKILL);
            return 1;
        }
        if (p == 0) {
            std::vector<std::string> argv_words;
            if (across_hosts) {
                ::dup2(out_pipe[1], 1);
                ::dup2(err_pipe[1], 2);
                ::setpgid(0, 0); // Ctrl-C reaches courier-run, which stops the localities itself
                std::string line =
                    "cd " + courier::run::shell_quote(cwd) + " 2>/dev/null; exec env";
                for (auto const& e : env) {
                    line += " " + courier::run::shell_quote(e);
                }
                for (auto const& w : words) {
                    line += " " + courier::run::shell_quote(w);
                }
                argv_words = agent_words;
                argv_words.push_back(host);
                argv_words.push_back(line);
            } else {
                for (std::size_t k = 0; k < env.size(); ++k) {
                    auto const& e = env[k];
                    auto eq = e.find('=');
                    bool keep = k >= passed.size() &&
                                (e.rfind("IPATH_", 0) == 0 || e.rfind("HFI_", 0) == 0);
                    ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), keep ? 0 : 1);
                }
                argv_words = words;
            }
            std::vector<char*> args;
            for (auto& w : argv_words) {
                args.push_back(w.data());
            }
            args.push_back(nullptr);
            ::execvp(args[0], args.data());
            std::fprintf(stderr, "courier-run: cannot run %s: %s\n", args[0], std::strerror(errno));
            ::_exit(127);
        }
        if (across_hosts) {
            ::close(out_pipe[1]);
            ::close(err_pipe[1]);
            output.add(static_cast<int>(r), out_pipe[0], err_pipe[0]);
        }
        g_children.push_back(p);
    }
    if (across_hosts) {
        output.start();
    }

    std::size_t alive = g_children.size();
    int first_failure = 0;
    g_record.assign(g_children.size(), {});
    // Rendezvous: collect every locality's address, then send everyone the table. A locality
    // may instead decline (it has nothing to run: --courier:help); if all do, there is no job.
    std::vector<int> fds(static_cast<std::size_t>(n), -1);
    std::vector<std::vector<char>> addrs(static_cast<std::size_t>(n));
    std::vector<bool> checked_in(static_cast<std::size_t>(n), false);
    long joined = 0, declined = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (joined + declined < n && first_failure == 0 && g_interrupted == 0) {
        reap(alive, first_failure);
        judge(
            first_failure, [&](std::size_t r) { return checked_in[r]; },
            [](std::size_t) { return false; });
        if (first_failure != 0) {
            break;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "courier-run: only %ld of %ld localities checked in within %d s\n",
                         joined, n, timeout_s);
            first_failure = 1;
            break;
        }
        pollfd pfd{lfd, POLLIN, 0};
        if (::poll(&pfd, 1, 100) <= 0) {
            continue;
        }
        int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            continue;
        }
        std::uint32_t hdr[2];
        if (!read_all(c, hdr, sizeof hdr) || hdr[0] >= n || checked_in[hdr[0]] ||
            (hdr[1] > 4096 && hdr[1] != declined_length)) {
            ::close(c);
            continue;
        }
        checked_in[hdr[0]] = true;
        if (hdr[1] == declined_length) {
            g_record[hdr[0]].declined = true;
            ++declined;
            ::close(c);
            continue;
        }
        addrs[hdr[0]].resize(hdr[1]);
        if (!read_all(c, addrs[hdr[0]].data(), hdr[1])) {
            checked_in[hdr[0]] = false;
            ::close(c);
            continue;
        }
        fds[hdr[0]] = c;
        ++joined;
    }
    if (first_failure == 0 && g_interrupted == 0 && declined > 0 && joined > 0) {
        for (std::size_t r = 0; r < g_record.size(); ++r) {
            if (g_record[r].declined) {
                job_failed(first_failure, r, 1,
                           "declined to join the job (nothing to run: --courier:help?) while "
                           "others joined it");
                break;
            }
        }
    }
    if (first_failure == 0 && g_interrupted == 0 && declined == 0) {
        for (long r = 0; r < n; ++r) {
            int fd = fds[static_cast<std::size_t>(r)];
            auto count = static_cast<std::uint32_t>(n);
            bool ok = write_all(fd, &token, sizeof token) && write_all(fd, &count, sizeof count);
            for (long k = 0; k < n && ok; ++k) {
                auto l = static_cast<std::uint32_t>(addrs[static_cast<std::size_t>(k)].size());
                ok = write_all(fd, &l, sizeof l) &&
                     write_all(fd, addrs[static_cast<std::size_t>(k)].data(), l);
            }
        }
    }
    ::close(lfd);
    if (first_failure != 0 || g_interrupted != 0) {
        stop_all(SIGTERM);
    }
    // Tells every surviving locality that `rank` is gone.
    auto announce_death = [&](std::size_t rank) {
        std::uint32_t notice[2] = {1, static_cast<std::uint32_t>(rank)};
        for (std::size_t k = 0; k < fds.size(); ++k) {
            if (k != rank && fds[k] >= 0 && g_children[k] > 0) {
                if (!write_all(fds[k], notice, sizeof notice)) {
                    ::close(fds[k]);
                    fds[k] = -1;
                }
            }
        }
    };
    // What the localities say on their connections: that they finished the job properly; the
    // end of a connection means nothing more will come from that locality.
    auto listen_to_localities = [&] {
        std::vector<pollfd> pfds;
        for (int fd : fds) {
            if (fd >= 0) {
                pfds.push_back({fd, POLLIN, 0});
            }
        }
        if (pfds.empty() || ::poll(pfds.data(), pfds.size(), 0) <= 0) {
            return;
        }
        for (auto const& p : pfds) {
            if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
                continue;
            }
            auto k =
                static_cast<std::size_t>(std::find(fds.begin(), fds.end(), p.fd) - fds.begin());
            std::uint32_t word[2];
            if (read_all(p.fd, word, sizeof word)) {
                g_record[k].finished = g_record[k].finished || word[0] == finished_word;
            } else {
                ::close(p.fd);
                fds[k] = -1;
            }
        }
    };
    auto any_unjudged = [] {
        return std::any_of(g_record.begin(), g_record.end(),
                           [](locality_record const& r) { return r.unjudged; });
    };
    std::vector<bool> announced(g_children.size(), false);
    // Wait for the localities. The first failure is announced to the others, who get the
    // grace period (--courier:peer_timeout) before SIGTERM, then 5 s more before SIGKILL.
    auto term_at = steady::time_point::max();
    auto kill_at = steady::time_point::max();
    auto job_deadline = job_timeout_s > 0 ? steady::now() + std::chrono::seconds(job_timeout_s)
                                          : steady::time_point::max();
    bool overran = false;
    bool failure_handled = false; // also when it happened before this loop (rendezvous)
    while (alive > 0 || any_unjudged()) {
        if (!overran && steady::now() >= job_deadline) {
            overran = true;
            std::fprintf(stderr,
                         "courier-run: the job did not finish within %d s; asking every locality "
                         "what it waits for, then stopping it\n",
                         job_timeout_s);
            std::uint32_t notice[2] = {2, 0};
            for (std::size_t k = 0; k < fds.size(); ++k) {
                if (fds[k] >= 0 && g_children[k] > 0) {
                    (void)write_all(fds[k], notice, sizeof notice);
                }
            }
            if (first_failure == 0) {
                first_failure = 124;
            }
            term_at = std::min(term_at, steady::now() + std::chrono::seconds(1));
        }
        listen_to_localities();
        reap(alive, first_failure);
        judge(
            first_failure, [&](std::size_t r) { return checked_in[r]; },
            [&](std::size_t r) { return fds[r] < 0; });
        if (first_failure != 0) {
            // Every locality that died after the job failed is announced, not only the first
            // (those that finished the job properly have said goodbye to their peers).
            for (std::size_t k = 0; k < g_children.size(); ++k) {
                if (g_children[k] <= 0 && !announced[k] && !g_record[k].finished) {
                    announced[k] = true;
                    announce_death(k);
                }
            }
            if (!failure_handled) {
                failure_handled = true;
                term_at = std::min(term_at, steady::now() + std::chrono::seconds(grace_s));
            }
        }
        if (g_interrupted != 0 && term_at == steady::time_point::max()) {
            term_at = steady::now();
        }
        if (steady::now() >= term_at && kill_at == steady::time_point::max()) {
            stop_all(SIGTERM);
            kill_at = steady::now() + std::chrono::seconds(5);
        }
        if (steady::now() > kill_at) {
            stop_all(SIGKILL);
        }
        if (alive > 0 || any_unjudged()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }
    for (int fd : fds) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    output.stop(1000); // what the localities wrote last
    remove_shared_memory_leftovers(job_id);
    if (g_interrupted != 0 && first_failure == 0) {
        return 128 + g_interrupted;
    }
    return first_failure;
}
