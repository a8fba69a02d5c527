"""The same verification jobs three ways: cold container per job, warm pool, bare subprocess.

The bare subprocess runs the same runner on the host with no isolation: the
floor any sandbox pays on top of. All three use the same concurrency.
Prints jobs per second and the ratios pool/cold and pool/bare.

    .venv/bin/python benchmarks/sandbox_throughput.py [--jobs 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mindforge.paths import sandbox_context_dir, seed_tasks_dir
from mindforge.sandbox import SandboxConfig, SandboxPool
from mindforge.sandbox import container as ct
from mindforge.sandbox.protocol import JobOutput, build_job
from mindforge.tasks.io import load_tasks

RUNNER = sandbox_context_dir() / "runner.py"


def jobs(n: int):
    seeds = [t for t in load_tasks(seed_tasks_dir() / "L2_python.jsonl")]
    return [(seeds[i % len(seeds)], seeds[i % len(seeds)].reference) for i in range(n)]


def passed(task, out: JobOutput) -> bool:
    return out.done is not None and all(out.results.get(t.name, {}).get("outcome") == "pass" for t in task.tests)


def run_pool(work, cfg):
    with SandboxPool(cfg) as pool:
        t = time.monotonic()
        verdicts = pool.verify_many(work)
        took = time.monotonic() - t
    return took, sum(v.status == "pass" for v in verdicts)


def cold_argv(image: str, cfg: SandboxConfig) -> list[str]:
    """`docker run` with the limits every pool container gets (see container.start_container)."""
    uid, gid = cfg.user.split(":")
    return [
        "docker", "run", "--rm", "-i", "--network", "none", "--read-only",
        "--tmpfs", f"/work:rw,nosuid,nodev,size={cfg.workdir_size},uid={uid},gid={gid},mode=0700",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size=16m,uid={uid},gid={gid},mode=0700",
        "--memory", cfg.memory, "--memory-swap", cfg.memory, "--cpus", str(cfg.cpus),
        "--pids-limit", str(cfg.pids), "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
        "--user", cfg.user, "--label", f"{cfg.label}=1", "--workdir", "/work",
        image, "python3", "-I", "-S", ct.RUNNER, "--in-container", "-",
    ]


def run_cold(work, cfg, image):
    argv = cold_argv(image, cfg)

    def one(job):
        task, cand = job
        nonce, payload = build_job(task, cand, cfg.test_timeout_s)
        out = subprocess.run(argv, input=json.dumps(payload), capture_output=True, text=True,
                             timeout=cfg.job_timeout_s, check=False)
        return passed(task, JobOutput(nonce, out.stdout))

    t = time.monotonic()
    with ThreadPoolExecutor(cfg.pool_size) as ex:
        ok = sum(ex.map(one, work))
    return time.monotonic() - t, ok


def run_bare(work, workers):
    def one(job):
        task, cand = job
        nonce, payload = build_job(task, cand, 5.0)
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "job.json"
            f.write_text(json.dumps(payload))
            out = subprocess.run([sys.executable, "-I", "-S", str(RUNNER), str(f)], capture_output=True, text=True, cwd=d)
        return passed(task, JobOutput(nonce, out.stdout))

    t = time.monotonic()
    with ThreadPoolExecutor(workers) as ex:
        ok = sum(ex.map(one, work))
    return time.monotonic() - t, ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    cfg = SandboxConfig(pool_size=args.workers)
    from mindforge.sandbox import ensure_image

    image = ensure_image(cfg)
    work = jobs(args.jobs)
    results = {
        "cold docker run per job": run_cold(work, cfg, image),
        "warm pool": run_pool(work, cfg),
        "bare subprocess (no isolation)": run_bare(work, args.workers),
    }
    print(f"{args.jobs} jobs ({sum(len(t.tests) for t, _ in work)} tests), {args.workers} workers")
    rate = {}
    for name, (took, ok) in results.items():
        rate[name] = args.jobs / took
        print(f"  {name:32s} {took:7.1f} s  {rate[name]:6.2f} jobs/s  {ok}/{args.jobs} passed")
    pool = rate["warm pool"]
    print(f"pool/cold = {pool / rate['cold docker run per job']:.2f}x   (goal >= 10)")
    print(f"pool/bare = {pool / rate['bare subprocess (no isolation)']:.2f}x   (goal >= 0.33, i.e. within 3x)")


if __name__ == "__main__":
    main()
