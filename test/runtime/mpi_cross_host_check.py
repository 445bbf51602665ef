#!/usr/bin/env python3
"""Plans whose stages span two hosts, run by mpirun over TCP, and a rank
killed on one host: the job ends in bounded time with an error naming it.

The two "hosts" are Linux network namespaces on this machine, each with its
own network stack and host name (unshare --uts), joined by a veth pair on a
private /24. mpirun runs in host A and starts host B's daemon through an
rsh agent that enters B's namespace instead of ssh-ing (Open MPI's
plm_rsh_agent); ranks talk only over TCP between the two addresses
(`--mca btl tcp,self`, btl/oob_tcp_if_include the subnet), so every byte
between the hosts crosses the veth link as it would cross a network.

  * a 3-rank training plan of gpt2-tiny over host-a (1 CPU) and host-b
    (2 CPUs, pp=2): its stages live on different hosts; 2 steps' losses and
    trained weights equal the same plan run as threads in one process;
  * the same model's 3-rank inference plan: outputs equal the threads run;
  * a rank on host-b killed (SIGKILL) mid-run: the job ends within 60 s,
    non-zero, and its output names the dead rank and its host (mpirun's
    line) and the peer host the surviving rank lost (Open MPI's TCP
    transport). A link cut is not tested: mpirun then ends only when its
    keepalives give the far daemon up (docs/runtime.md, "Across hosts").

  mpi_cross_host_check.py --hetplan BIN --mpi MPIRUN --model MODEL --work DIR

Needs root (ip netns, unshare). Exit 77 (ctest SKIP) without mpirun, without
MPI support in hetplan, or where this machine cannot create network
namespaces (the reason is printed; scripts/test-summary.py checks it).
"""
import json, os, shutil, signal, subprocess, sys, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_args  # noqa: E402

BOUND_S = 60  # a faulted job must be over this long after the fault

CLUSTER = """nodes:
  - name: host-a
    devices: [{type: CPU, count: 1}]
  - name: host-b
    devices: [{type: CPU, count: 2}]
    speed_factors: {CPU: 0.5}
"""


def sh(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stdout.strip()}")
    return r


class Hosts:
    """Two network namespaces joined by a veth pair; removed on close()."""

    def __init__(self):
        tag = os.getpid() % 100000
        self.ns = [f"hetplan-{tag}-a", f"hetplan-{tag}-b"]
        self.veth = [f"hpa{tag}", f"hpb{tag}"]
        net = f"10.{200 + tag % 50}.{tag % 250}"
        self.subnet = f"{net}.0/24"
        self.ip = [f"{net}.1", f"{net}.2"]
        self.names = ["host-a", "host-b"]
        self.made = []

    def open(self):
        for ns in self.ns:
            sh(["ip", "netns", "add", ns])
            self.made.append(ns)
        sh(["ip", "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1]])
        for i in range(2):
            sh(["ip", "link", "set", self.veth[i], "netns", self.ns[i]])
            sh(["ip", "-n", self.ns[i], "addr", "add", f"{self.ip[i]}/24", "dev", self.veth[i]])
            sh(["ip", "-n", self.ns[i], "link", "set", self.veth[i], "up"])
            sh(["ip", "-n", self.ns[i], "link", "set", "lo", "up"])

    def close(self):
        for ns in self.made:  # nothing started in a host outlives the test
            for pid in sh(["ip", "netns", "pids", ns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        for ns in self.made:
            sh(["ip", "netns", "delete", ns], check=False)  # deletes the veth pair with it
        self.made = []

    def write_agent(self, path):
        """Open MPI calls `AGENT HOST ORTED-COMMAND...`: enter HOST's namespace."""
        cases = "\n".join(f"  {name}) ns={ns};;" for ns, name in zip(self.ns, self.names))
        with open(path, "w") as f:
            f.write(f"""#!/bin/sh
# plm_rsh_agent of mpi_cross_host_check.py: runs the command in HOST's network namespace
host=$1; shift
case "$host" in
{cases}
  *) echo "no such test host: $host" >&2; exit 1;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $host; $*"
""")
        os.chmod(path, 0o755)

    def prefix(self, i):
        """Run a command in host i (its namespace and host name)."""
        return ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "sh", "-c",
                f'hostname {self.names[i]}; exec "$@"', "sh"]

    def host_of(self, pid):
        r = sh(["ip", "netns", "identify", str(pid)], check=False)
        name = r.stdout.strip()
        return self.ns.index(name) if name in self.ns else None


def mpirun_cmd(a, hosts, agent, rankfile, n):
    return hosts.prefix(0) + [a.mpi, "--allow-run-as-root", "--mca", "plm_rsh_agent", agent,
                              "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", hosts.subnet,
                              "--mca", "oob_tcp_if_include", hosts.subnet,
                              # mpirun learns that a daemon behind a dead link is gone
                              # from TCP keepalives on its idle control connection:
                              # after 10 s + 3 x 2 s here (300 s + 9 x 20 s by default).
                              "--mca", "oob_tcp_keepalive_time", "10", "--mca", "oob_tcp_keepalive_intvl", "2",
                              "--mca", "oob_tcp_keepalive_probes", "3",
                              "--rankfile", rankfile, "-np", str(n)]


# Ranks are numbered node by node (passes/cluster/Cluster.h): host-a's one
# CPU is rank 0, host-b's two are ranks 1 and 2.
NODE_OF_RANK = {0: "host-a", 1: "host-b", 2: "host-b"}


def rank_nodes(a, plan):
    """Plan rank -> node name, and each stage's node names."""
    info = json.loads(sh([a.hetplan, "explain", plan, "--json"]).stdout)
    if info["devices"] != len(NODE_OF_RANK):
        raise RuntimeError(f"{plan}: {info['devices']} ranks, expected {len(NODE_OF_RANK)}")
    stages = {}
    for st in info["stages"]:
        for w in st["workers"]:
            for r in w["ranks"]:
                stages.setdefault(st["index"], set()).add(NODE_OF_RANK[r])
    return dict(NODE_OF_RANK), stages


def write_rankfile(path, nodes, hosts):
    with open(path, "w") as f:
        slot = {}
        for r in sorted(nodes):
            i = hosts.names.index(nodes[r])
            f.write(f"rank {r}={hosts.names[i]} slot={slot.get(i, 0)}\n")
            slot[i] = slot.get(i, 0) + 1


def ranks_of(p, hetplan, plan, want, deadline_s=60):
    """The hetplan processes (ranks) running `plan`, on either host, once `want` run."""
    exe = os.path.realpath(hetplan)
    deadline = time.time() + deadline_s
    found = []
    while time.time() < deadline and p.poll() is None:
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if os.path.realpath(f"/proc/{d}/exe") != exe:
                    continue
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if plan.encode() in f.read():
                        found.append(int(d))
            except OSError:
                continue
        if len(found) >= want:
            return found
        time.sleep(0.2)
    return found


def main():
    # ctest's timeout sends SIGTERM: still remove the namespaces.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    a = mpi_args.parse()
    if a is None:
        return 77
    for tool in ("ip", "unshare", "pgrep"):
        if not shutil.which(tool):
            print(f"SKIP: cannot create network namespaces: {tool} is not installed")
            return 77
    work = a.work
    hosts = Hosts()
    try:
        hosts.open()
    except RuntimeError as e:
        hosts.close()
        print(f"SKIP: cannot create network namespaces: {e}")
        return 77
    try:
        return check(a, hosts, work)
    finally:
        hosts.close()


def check(a, hosts, work):
    agent = os.path.join(work, "netns-rsh")
    hosts.write_agent(agent)
    cluster = os.path.join(work, "hosts.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    ids = os.path.join(work, "ids.npy")
    np.save(ids, np.random.default_rng(0).integers(0, 50, size=(6, 8), dtype=np.int64))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    failures = 0

    for mode in ("train", "infer"):
        plan = os.path.join(work, f"{mode}.plan")
        r = sh([a.hetplan, "compile", a.model, "--mode", mode, "--cluster", cluster, "--batch", "6", "--seq", "8",
                "--pin", "pp=2,mb=2", "--dtype", "fp32", "--quiet", "-o", plan], check=False)
        if r.returncode != 0:
            print(f"FAIL {mode}: compile\n{r.stdout}")
            return 1
        nodes, stages = rank_nodes(a, plan)
        spans = [sorted(s) for s in stages.values()]
        if len(nodes) != 3 or len({n for s in spans for n in s}) != 2 or len(stages) < 2:
            print(f"FAIL {mode}: the plan does not put its stages on both hosts: ranks {nodes}, stages {spans}")
            return 1
        rankfile = os.path.join(work, f"{mode}.ranks")
        write_rankfile(rankfile, nodes, hosts)
        outs = {}
        for how in ("threads", "hosts"):
            out_dir = os.path.join(work, f"{mode}-{how}")
            cmd = [a.hetplan, "run", plan, "--input", f"input_ids={ids}", "--output", out_dir, "--quiet"]
            if mode == "train":
                cmd += ["--labels", ids, "--steps", "2", "--save-model", os.path.join(out_dir, "trained.onnx")]
            if how == "hosts":
                cmd = mpirun_cmd(a, hosts, agent, rankfile, 3) + cmd
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                   timeout=300)
            except subprocess.TimeoutExpired:
                print(f"FAIL {mode} {how}: hetplan run did not end in 300 s")
                return 1
            if r.returncode != 0:
                print(f"FAIL {mode} {how}: hetplan run exit {r.returncode}\n{r.stdout[-3000:]}")
                return 1
            outs[how] = out_dir
        failures += compare(mode, outs["threads"], outs["hosts"])
        if mode == "train":
            print(f"ok: train plan, stages on {spans}, ranks {nodes}: mpirun over TCP between two hosts "
                  "gives the threads run's losses and trained weights")
        else:
            print(f"ok: infer plan, stages on {spans}: mpirun over TCP between two hosts gives the threads "
                  "run's outputs")

    return failures + kill_rank(a, hosts, work, agent, ids, env)


def kill_rank(a, hosts, work, agent, ids, env):
    """A long run of the training plan; one rank on host-b killed."""
    plan = os.path.join(work, "train.plan")
    nodes, _ = rank_nodes(a, plan)
    rankfile = os.path.join(work, "train.ranks")
    log_path = os.path.join(work, "kill.log")
    cmd = mpirun_cmd(a, hosts, agent, rankfile, 3) + [
        a.hetplan, "run", plan, "--input", f"input_ids={ids}", "--labels", ids, "--steps", "100000", "--quiet",
        "--output", os.path.join(work, "kill-out")]
    # Output to a file: a process that outlives mpirun cannot hold a pipe open.
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        pids = ranks_of(p, a.hetplan, plan, 3)
        if len(pids) < 3:
            print(f"FAIL kill: the job did not start 3 ranks (found {pids})\n{open(log_path).read()[-3000:]}")
            return 1
        time.sleep(3)  # into the steps
        on_b = [q for q in pids if hosts.host_of(q) == 1]
        if not on_b:
            print(f"FAIL kill: no rank runs in {hosts.ns[1]} ({pids})")
            return 1
        killed = on_b[0]
        t0 = time.time()
        os.kill(killed, signal.SIGKILL)
        try:
            p.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            print(f"FAIL kill: the job still ran {BOUND_S} s after rank pid {killed} was killed\n"
                  f"{open(log_path).read()[-3000:]}")
            return 1
        took = time.time() - t0
        out = open(log_path).read()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if p.returncode == 0:
        print(f"FAIL kill: the job exited 0\n{out[-3000:]}")
        return 1
    # mpirun's line: "process rank R with PID P on node host-b exited on signal 9".
    b_ranks = [r for r, n in nodes.items() if n == "host-b"]
    line = next((l for l in out.splitlines() if f"PID {killed} " in l), "")
    if "host-b" not in line or not any(f"rank {r} " in line for r in b_ranks):
        print(f"FAIL kill: no line names the killed rank (pid {killed}) and host-b\n{out[-3000:]}")
        return 1
    peer = next((l.strip() for l in out.splitlines() if "Peer host" in l), "")
    print(f"ok kill: rank pid {killed} on host-b killed; the job ended in {took:.1f} s, exit {p.returncode}: "
          f"{line.strip()}" + (f"; the surviving rank: {peer}" if peer else ""))
    return 0


def compare(mode, ref_dir, got_dir):
    worst = 0.0
    names = sorted(f for f in os.listdir(ref_dir) if f.endswith(".npy"))
    if not names:
        print(f"FAIL {mode}: the threads run wrote no outputs in {ref_dir}")
        return 1
    for f in names:
        r, g = np.load(os.path.join(ref_dir, f)), np.load(os.path.join(got_dir, f))
        if r.shape != g.shape or not np.allclose(g, r, rtol=1e-5, atol=1e-6):
            print(f"FAIL {mode}: {f} differs between the threads run and the two-host run")
            return 1
    if mode == "train":
        import onnx
        from onnx import numpy_helper
        ws = [{i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(d, "trained.onnx")).graph.initializer}
              for d in (ref_dir, got_dir)]
        if set(ws[0]) != set(ws[1]) or not ws[0]:
            print("FAIL train: the trained models hold different weights")
            return 1
        for k, r in ws[0].items():
            worst = max(worst, float(np.max(np.abs(ws[1][k].astype(np.float64) - r), initial=0.0)))
        if worst > 1e-5:
            print(f"FAIL train: trained weights differ by up to {worst:.3g}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
