#!/usr/bin/env python3
"""Example simulation for simtel: an RL-style loop that reports reward,
episode length and step time per environment through its node's agent,
and reads the current policy version from the agent.

Standard library only. Run it under srun from a job script that started
the agents (see simtel-job.sbatch). It finds its agent through
SIMTEL_AGENT_URL (HTTP) or SIMTEL_AGENT_UDP (host:port), or, when those are
unset, from SIMTEL_AGENT_PORT_BASE + 2*SLURM_NODEID (the job script's rule
for several emulated nodes on one host).

  python3 sim.py --steps 200 --envs 2 --policy actor
  python3 sim.py --fail 3          # exit 3 after the steps (failure test)
"""

import argparse
import json
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.request


def agent_addresses():
    url = os.environ.get("SIMTEL_AGENT_URL")
    udp = os.environ.get("SIMTEL_AGENT_UDP")
    if not url or not udp:
        base = int(os.environ.get("SIMTEL_AGENT_PORT_BASE", "8186"))
        node = int(os.environ.get("SLURM_NODEID", "0"))
        port = base + 2 * node
        url = url or f"http://127.0.0.1:{port}"
        udp = udp or f"127.0.0.1:{port + 1}"
    host, port = udp.rsplit(":", 1)
    return url.rstrip("/"), (host, int(port))


def escape_tag(v):
    return str(v).replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


class Agent:
    """Sends line protocol to the node's agent: HTTP batches (answered 204
    once the agent has spooled them) or UDP datagrams (fire and forget)."""

    def __init__(self, url, udp, transport, ack_file=None):
        self.url, self.udp, self.transport = url, udp, transport
        self.lines = []
        self.acked = 0  # samples the agent has confirmed (HTTP 204: spooled)
        self.ack_file = ack_file
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if transport == "udp" else None

    def add(self, line):
        self.lines.append(line)
        if len(self.lines) >= 500:
            self.flush()

    def flush(self):
        if not self.lines:
            return
        if self.sock:
            chunk = []
            for line in self.lines:  # keep datagrams well under 64 KiB
                chunk.append(line)
                if len(chunk) == 50:
                    self.sock.sendto(("\n".join(chunk) + "\n").encode(), self.udp)
                    chunk = []
            if chunk:
                self.sock.sendto(("\n".join(chunk) + "\n").encode(), self.udp)
        else:
            body = ("\n".join(self.lines) + "\n").encode()
            req = urllib.request.Request(f"{self.url}/write?db=sim&precision=ns", data=body, method="POST")
            for attempt in range(20):
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        if r.status == 204:
                            self.acked += len(self.lines)
                            self.record_acks()
                            break
                except urllib.error.HTTPError as e:
                    if e.code != 503:  # 503: the spool is full, retry later
                        raise SystemExit(f"sim: agent refused samples: {e.code} {e.read().decode(errors='replace')}")
                except OSError as e:
                    if attempt == 19:
                        raise SystemExit(f"sim: cannot reach the agent at {self.url}: {e}")
                time.sleep(0.2)
        self.lines = []

    def record_acks(self):
        if self.ack_file:  # atomically, so a kill never leaves half a number
            tmp = self.ack_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{self.acked}\n")
            os.replace(tmp, self.ack_file)

    def policy_version(self, name, wait=0.0):
        """The newest policy version the node holds, or -1 before the first.
        With wait, long-poll up to that many seconds for a first version."""
        if not name:
            return -1
        url = f"{self.url}/v1/policy/{name}"
        if wait:
            url += f"?after=0&wait={wait}s"
        try:
            with urllib.request.urlopen(url, timeout=wait + 5) as r:
                if r.status == 304:
                    return -1
                return int(json.load(r).get("version", -1))
        except urllib.error.HTTPError as e:
            if e.code in (404, 304):
                return -1  # no version published yet
            raise
        except OSError:
            return -1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="steps per environment")
    p.add_argument("--envs", type=int, default=2, help="environments per rank")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step (to make a long job)")
    p.add_argument("--policy", default="", help="policy whose version to read from the agent")
    p.add_argument("--wait-policy", type=float, default=0, help="wait up to this many seconds for a first policy version")
    p.add_argument("--transport", choices=["http", "udp"], default="http")
    p.add_argument("--fail", type=int, default=0, help="exit with this code after the steps (failure test)")
    p.add_argument("--ack-dir", default="", help="write the count of samples the agent acknowledged to DIR/rank-<rank>.acked (HTTP only)")
    a = p.parse_args()

    rank = os.environ.get("SLURM_PROCID", "0")
    url, udp = agent_addresses()
    ack_file = os.path.join(a.ack_dir, f"rank-{rank}.acked") if a.ack_dir else None
    agent = Agent(url, udp, a.transport, ack_file)
    rng = random.Random(int(rank))
    version = agent.policy_version(a.policy, a.wait_policy)
    sent = 0
    for step in range(a.steps):
        if a.policy and step % 50 == 0:
            version = agent.policy_version(a.policy)
        for env in range(a.envs):
            t0 = time.perf_counter()
            reward = rng.gauss(1.0, 0.5)
            length = rng.randint(10, 500)
            dt = time.perf_counter() - t0 + 1e-6
            now = time.time_ns()
            tags = f"env=env{env},rank={escape_tag(rank)}"
            agent.add(f"reward,{tags} value={reward:.6f},iteration={step}i,policy_version={version}i {now}")
            agent.add(f"episode_length,{tags} value={length}i,iteration={step}i {now}")
            agent.add(f"step_time,{tags} value={dt:.9f},iteration={step}i {now}")
            sent += 3
        if a.step_sleep:
            agent.flush()
            time.sleep(a.step_sleep)
    agent.flush()
    print(f"sim rank {rank}: sent {sent} samples to {url if a.transport == 'http' else udp}, policy version {version}", flush=True)
    if a.fail:
        print(f"sim rank {rank}: failing with exit code {a.fail} as asked", file=sys.stderr, flush=True)
        sys.exit(a.fail)


if __name__ == "__main__":
    main()
