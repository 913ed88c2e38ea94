// troupe under the launchers clusters already have, for real: torchrun (the Python
// environment's), Open MPI's mpirun and SLURM's srun and sbatch (a one-node cluster the test
// starts) start `troupe rank JOB` with their own rank variables and nothing passed by hand
// (no coordinator, no port): the tiny GPT trains at dp 2 and pp 2 (mpirun and srun also
// over 4 processes), each run's losses and final parameters equal to `troupe run` of the
// same job, bit for bit; a rank killed under srun stops the job within 10 s. Each
// launcher's tests skip, saying why, where it is not installed or cannot start.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"
#include "tests/support/trained_run.hpp"

namespace troupe::testing {
namespace {

struct Layout {
  int dp = 2;
  int pp = 1;
};

std::string sets(const Layout& l) {
  return " --set train.steps=8 --set cluster.world_size=" + std::to_string(l.dp * l.pp) +
         " --set parallel.dp=" + std::to_string(l.dp) + " --set parallel.pp=" + std::to_string(l.pp) +
         " --set batch.global_batch_size=16 --set batch.micro_batch_size=" + std::to_string(8 / l.dp) +
         " --set batch.gradient_accumulation_steps=2 --set zero.stage=1";
}

std::string job() {
  return std::string(TROUPE_SOURCE_DIR) + "/configs/tiny-gpt.toml";
}

TrainedRun outputs(const std::string& dir) {
  return read_run(dir + "/metrics.jsonl", dir + "/parameters.bin");
}

// `troupe run` of the same job, the launcher troupe ships.
TrainedRun troupe_run(const Layout& l) {
  const std::string dir = make_temp_dir();
  auto r = run_command(std::string(TROUPE_BINARY) + " run " + job() + sets(l) +
                           " --set cluster.coordinator=" + free_coordinator() + " --metrics " + dir +
                           "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return outputs(dir);
}

// `launcher` followed by `troupe rank JOB`: the same steps and parameters as troupe_run.
void expect_same_run(const std::string& launcher, const Layout& l, const std::string& what) {
  const std::string dir = make_temp_dir();
  auto r = run_command(launcher + " " + TROUPE_BINARY + " rank " + job() + sets(l) + " --metrics " + dir +
                           "/metrics.jsonl --parameters-out " + dir + "/parameters.bin",
                       300);
  ASSERT_EQ(r.exit_code, 0) << what << ": " << r.output;
  const TrainedRun launched = outputs(dir), own = troupe_run(l);
  ASSERT_EQ(launched.losses.size(), 8u) << what << ": " << r.output;
  EXPECT_EQ(launched.losses, own.losses) << what;
  ASSERT_EQ(launched.parameters.size(), own.parameters.size()) << what;
  EXPECT_EQ(0, std::memcmp(launched.parameters.data(), own.parameters.data(), own.parameters.size() * 4))
      << what << ": the final parameters differ";
  std::printf("%s: dp %d x pp %d, 8 steps and the final parameters equal to troupe run's, bit for bit\n",
              what.c_str(), l.dp, l.pp);
}

std::string found(const std::string& program) {
  auto r = run_command("command -v " + program, 10);
  std::string path = r.output;
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return r.exit_code == 0 ? path : "";
}

// torchrun from the Python environment whose torch troupe builds against; --standalone:
// its own rendezvous on a free port, its agent's store on MASTER_PORT, troupe's rank 0 on
// the port after it.
TEST(Launchers, TorchrunStartsRanksThatTrainAsTroupeRunDoes) {
  const std::string python = TROUPE_TORCH_PYTHON;
  const std::string torchrun = python.empty() ? "" : python.substr(0, python.rfind('/')) + "/torchrun";
  if (torchrun.empty() || found(torchrun).empty())
    GTEST_SKIP() << "no torchrun beside TROUPE_TORCH_PYTHON (scripts/torch-env.sh installs it)";
  for (const Layout& l : {Layout{2, 1}, Layout{1, 2}})
    expect_same_run(torchrun + " --standalone --nproc-per-node 2 --no-python", l, "torchrun");
}

// Open MPI's mpirun on this host: the coordinator on 127.0.0.1 at a port derived from the
// job, so two jobs at once do not collide and nothing is passed by hand.
TEST(Launchers, MpirunStartsRanksThatTrainAsTroupeRunDoes) {
  const std::string mpirun = found("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "no mpirun (Debian's openmpi-bin; scripts/setup.sh installs it)";
  // As root Open MPI wants both variables; --oversubscribe: 4 processes on 2 cores.
  const std::string launcher =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + mpirun + " --oversubscribe -np ";
  for (const Layout& l : {Layout{2, 1}, Layout{1, 2}, Layout{2, 2}})
    expect_same_run(launcher + std::to_string(l.dp * l.pp), l, "mpirun");
}

// DeepSpeed's launcher on localhost (no hostfile, so no ssh): --no_python --no_local_rank
// starts `troupe rank` itself with DeepSpeed's variables (LOCAL_SIZE, its MASTER_PORT, which
// is troupe's rank 0's to listen on).
std::string deepspeed_launcher() {
  const std::string python = TROUPE_TORCH_PYTHON;
  const std::string deepspeed = python.empty() ? "" : python.substr(0, python.rfind('/')) + "/deepspeed";
  if (deepspeed.empty() || found(deepspeed).empty()) return "";
  const std::string coordinator = free_coordinator();
  return deepspeed + " --num_gpus 2 --master_port " + coordinator.substr(coordinator.rfind(':') + 1) +
         " --no_python --no_local_rank";
}

TEST(Launchers, DeepSpeedStartsRanksThatTrainAsTroupeRunDoes) {
  if (deepspeed_launcher().empty())
    GTEST_SKIP() << "no deepspeed beside TROUPE_TORCH_PYTHON (scripts/torch-env.sh installs it)";
  for (const Layout& l : {Layout{2, 1}, Layout{1, 2}}) expect_same_run(deepspeed_launcher(), l, "deepspeed");
}

// A one-node SLURM cluster on this machine for one test (scripts/slurm-cluster.sh: munged,
// slurmctld and slurmd on free ports, every file in a folder of the test's), stopped after.
class SlurmCluster {
 public:
  // Directly under /tmp: the daemons' sockets are in the folder, and a socket's path has at
  // most 107 characters, which a nested $TMPDIR would bring closer.
  SlurmCluster() : dir_(make_temp_dir("troupe-slurm-", "/tmp")) {
    auto r = run_command("bash " + std::string(TROUPE_SOURCE_DIR) + "/scripts/slurm-cluster.sh start " +
                             dir_ + " " + std::to_string(free_port()) + " " + std::to_string(free_port()),
                         60);
    std::string conf = r.output;
    while (!conf.empty() && conf.back() == '\n') conf.pop_back();
    conf = conf.substr(conf.rfind('\n') + 1);
    if (r.exit_code == 0)
      conf_ = conf;
    else
      why_ = r.output;
  }
  ~SlurmCluster() {
    run_command("bash " + std::string(TROUPE_SOURCE_DIR) + "/scripts/slurm-cluster.sh stop " + dir_, 30);
  }
  bool up() const { return !conf_.empty(); }
  const std::string& why() const { return why_; }
  /// What a command line starts with to use this cluster.
  std::string env() const { return "SLURM_CONF=" + conf_ + " "; }

 private:
  std::string dir_, conf_, why_;
};

// srun -n 4 at dp 4 and pp 2 × dp 2, and sbatch of examples/slurm/train.sbatch: ranks,
// local ranks and the coordinator (the job's first host at a port from the job id) from
// SLURM's variables alone.
TEST(Launchers, SrunAndSbatchStartRanksThatTrainAsTroupeRunDoes) {
  SlurmCluster slurm;
  if (!slurm.up()) GTEST_SKIP() << "no SLURM cluster could start here: " << slurm.why();
  for (const Layout& l : {Layout{4, 1}, Layout{2, 2}})
    expect_same_run(slurm.env() + "srun --kill-on-bad-exit=1 -n 4", l, "srun");
  const std::string dir = make_temp_dir();
  auto r = run_command(slurm.env() + "TROUPE=" + TROUPE_BINARY + " sbatch --wait --ntasks=4 --output=" + dir +
                           "/out.txt " + TROUPE_SOURCE_DIR + "/examples/slurm/train.sbatch " + job() +
                           sets(Layout{4, 1}) + " --metrics " + dir + "/metrics.jsonl --parameters-out " +
                           dir + "/parameters.bin",
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output << read_file(dir + "/out.txt");
  const TrainedRun batch = outputs(dir), own = troupe_run(Layout{4, 1});
  EXPECT_EQ(batch.losses, own.losses) << read_file(dir + "/out.txt");
  ASSERT_EQ(batch.parameters.size(), own.parameters.size());
  EXPECT_EQ(0, std::memcmp(batch.parameters.data(), own.parameters.data(), own.parameters.size() * 4));
  std::printf(
      "sbatch: examples/slurm/train.sbatch, dp 4: losses and final parameters equal to troupe run's\n");
}

// The process of `troupe rank` whose environment holds `env`, among those whose command line
// holds `marker`; -1 when none.
int find_rank_process(const std::string& marker, const std::string& env) {
  DIR* proc = opendir("/proc");
  int found = -1;
  while (dirent* e = readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(marker) == std::string::npos || cmdline.find("rank") == std::string::npos) continue;
    const std::string environ = read_file("/proc/" + std::to_string(pid) + "/environ");
    if (environ.find('\0' + env + '\0') != std::string::npos || environ.rfind(env + '\0', 0) == 0)
      found = pid;
  }
  closedir(proc);
  return found;
}

// `launcher` starts 2 ranks of a long job; the one whose environment holds `rank1_env` is
// killed once training is under way: the job stops within 10 s and its output holds `named`.
void expect_killed_rank_stops_the_job(const std::string& launcher, const std::string& rank1_env,
                                      const std::string& what, const std::string& named = "rank 1") {
  const std::string dir = make_temp_dir(), metrics = dir + "/metrics.jsonl";
  const std::string marker = "train.log_interval=9";
  CommandResult job_result;
  std::thread job_thread([&] {
    job_result = run_command(launcher + " " + TROUPE_BINARY + " rank " + job() +
                                 " --set train.steps=100000 --set " + marker + " --metrics " + metrics,
                             120);
  });
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (read_file(metrics).size() < 200 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int pid = find_rank_process(marker, rank1_env);
  if (pid <= 0) {  // end the job all the same before failing
    for (int rank : {0, 1}) {
      const std::string env = rank1_env.substr(0, rank1_env.size() - 1) + std::to_string(rank);
      if (const int other = find_rank_process(marker, env); other > 0) kill(other, SIGKILL);
    }
    job_thread.join();
    FAIL() << what << ": rank 1 was not found training within 60 s: " << job_result.output;
  }
  const auto killed_at = Clock::now();
  kill(pid, SIGKILL);
  job_thread.join();
  const double stop_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_NE(job_result.exit_code, 0) << what << ": " << job_result.output;
  EXPECT_LT(stop_s, 10.0) << what << ": " << job_result.output;
  EXPECT_NE(job_result.output.find(named), std::string::npos) << what << ": " << job_result.output;
  std::printf("%s: rank 1 killed, the job stopped %.1f s later, saying \"%s\"\n", what.c_str(), stop_s,
              named.c_str());
}

TEST(Launchers, ARankKilledUnderSrunStopsTheJobNamingIt) {
  SlurmCluster slurm;
  if (!slurm.up()) GTEST_SKIP() << "no SLURM cluster could start here: " << slurm.why();
  expect_killed_rank_stops_the_job(slurm.env() + "srun -n 2", "SLURM_PROCID=1", "srun",
                                   "rank 1's process (pid ");
}

// The same under the launchers that are installed of torchrun, mpirun and DeepSpeed's. torchrun
// and DeepSpeed's launcher kill the other ranks within a second of one's death (DeepSpeed's
// own report names a process, not a rank); rank 0 watches the process of each rank of its
// host, so it names the dead one first, under each.
TEST(Launchers, ARankKilledUnderTorchrunMpirunOrDeepSpeedStopsTheJobNamingIt) {
  const std::string python = TROUPE_TORCH_PYTHON;
  const std::string torchrun = python.empty() ? "" : python.substr(0, python.rfind('/')) + "/torchrun";
  int launchers = 0;
  if (!torchrun.empty() && !found(torchrun).empty() && ++launchers)
    expect_killed_rank_stops_the_job(torchrun + " --standalone --nproc-per-node 2 --no-python", "RANK=1",
                                     "torchrun", "rank 1's process (pid ");
  if (const std::string mpirun = found("mpirun"); !mpirun.empty() && ++launchers)
    expect_killed_rank_stops_the_job(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + mpirun + " --oversubscribe -np 2",
        "OMPI_COMM_WORLD_RANK=1", "mpirun", "rank 1's process (pid ");
  if (const std::string deepspeed = deepspeed_launcher(); !deepspeed.empty() && ++launchers)
    expect_killed_rank_stops_the_job(deepspeed, "RANK=1", "deepspeed", "rank 1's process (pid ");
  if (launchers == 0) GTEST_SKIP() << "none of torchrun, mpirun and deepspeed is installed";
}

// A launcher's world that contradicts the job is refused naming both; a coordinator that
// does not answer is named with the variables it came from, within the bootstrap timeout.
TEST(LauncherBadInput, AContradictingWorldOrAnUnreachableCoordinatorIsNamed) {
  const std::string mpirun = found("mpirun");
  if (!mpirun.empty()) {
    auto r = run_command("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + mpirun +
                             " --oversubscribe -np 2 " + TROUPE_BINARY + " rank " + job() +
                             " --set cluster.world_size=4 --set parallel.dp=4",
                         120);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE says the world has 2 ranks but " +
                            job() + " sets [cluster] world_size = 4"),
              std::string::npos)
        << r.output;
  }
  const std::string coordinator = free_coordinator();
  const std::string port = coordinator.substr(coordinator.rfind(':') + 1);
  auto r = run_command("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + TROUPE_BINARY +
                           " rank " + job() + " --set cluster.bootstrap_timeout_s=3",
                       60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find("could not join the cluster at 127.0.0.1:" + port +
                          " (from MASTER_ADDR and MASTER_PORT) within 3 s"),
            std::string::npos)
      << r.output;
}

// Whether this machine has the IPv6 loopback (a container may run without it).
bool has_ipv6_loopback() {
  auto r = run_command("ip -6 addr show dev lo | grep -q 'inet6 ::1/'", 10);
  return r.exit_code == 0;
}

// Clusters that write rank 0's address as IPv6: mpirun passing MASTER_ADDR=::1 (Open MPI's
// habit, -x) starts ranks that train as troupe run does; with nothing listening there, a
// rank names the bracketed address and the variables it came from.
TEST(Launchers, AnIpv6MasterAddrServesAsTheCoordinator) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "this machine has no IPv6 loopback (::1) to listen on";
  const std::string mpirun = found("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "no mpirun (Debian's openmpi-bin; scripts/setup.sh installs it)";
  const std::string port = std::to_string(free_port());
  expect_same_run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MASTER_ADDR=::1 MASTER_PORT=" +
                      port + " " + mpirun + " --oversubscribe -x MASTER_ADDR -x MASTER_PORT -np 2",
                  Layout{2, 1}, "mpirun, MASTER_ADDR=::1");

  auto r = run_command("RANK=1 WORLD_SIZE=2 MASTER_ADDR=::1 MASTER_PORT=" + port + " " + TROUPE_BINARY +
                           " rank " + job() + " --set cluster.bootstrap_timeout_s=3",
                       60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_NE(r.output.find("could not join the cluster at [::1]:" + port +
                          " (from MASTER_ADDR and MASTER_PORT) within 3 s"),
            std::string::npos)
      << r.output;
}

// Two processes given one rank number: rank 0 refuses the second to say hello, naming the
// rank and the host of the first, and the refused one exits at once saying so.
TEST(LauncherBadInput, TwoProcessesGivenOneRankNumberAreRefused) {
  const std::string dir = make_temp_dir(), coordinator = free_coordinator();
  const std::string env =
      "WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + coordinator.substr(coordinator.rfind(':') + 1) +
      " ";
  const std::string rank =
      std::string(TROUPE_BINARY) + " rank " + job() +
      " --set cluster.world_size=3 --set parallel.dp=3 --set cluster.bootstrap_timeout_s=8";
  run_command(env + "RANK=0 " + rank + " > " + dir + "/rank0 2>&1 & " + env + "RANK=1 " + rank + " > " + dir +
                  "/first 2>&1 & " + env + "RANK=1 " + rank + " > " + dir + "/second 2>&1 & wait",
              90);
  const std::string first = read_file(dir + "/first"), second = read_file(dir + "/second");
  const std::string refused = "refused rank 1: rank 1 has already joined, from host ";
  const int refusals =
      (first.find(refused) != std::string::npos) + (second.find(refused) != std::string::npos);
  EXPECT_EQ(refusals, 1) << "first:\n" << first << "second:\n" << second;
  EXPECT_NE(read_file(dir + "/rank0").find("rank(s) 2 did not join within 8 s"), std::string::npos)
      << read_file(dir + "/rank0");
}

}  // namespace
}  // namespace troupe::testing
