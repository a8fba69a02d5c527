"""One GRPO step two ways side by side: naive against resident-prefix, chunked logprobs in both.

The real default model with an L2 adapter (fresh A, small random B) in fp32;
one group of G samples sharing a prompt of ``--prompt`` tokens, each with a
completion of ``--completion`` tokens; the same samples, loss type and token
weights for both variants. Each variant runs in its own process, so one's
allocations cannot hide in the other's peak. Per variant:

- step time: forward + backward of the whole step (``loss_and_grads``), as
  CPU time of the process (all its threads) and wall time: on a shared
  machine the CPU time is the one other processes do not distort;
- peak memory: the process's RSS high-water during the step (a sampling
  thread every 2 ms, and ``ru_maxrss``), minus the RSS before the step, so
  the model weights both share are not counted; the total peak is printed
  too.

Variants: ``naive`` (the G whole sequences, one backward), ``prefix`` (the
resident prefix, all G suffixes at once), ``prefix-split`` (one prefix
forward, the suffixes two at a time); ``naive-accum`` (naive, one sequence a
backward: the naive step's compute where its memory does not fit). Prints one line a variant, the loss
and gradient-norm agreement, and the ratios to naive (goals: memory <= 0.4x,
time <= 0.6x). A variant that exceeds the memory limit is reported as such.

    .venv/bin/python benchmarks/grpo_step.py [--prompt 1024] [--group 8] [--completion 128] [--threads 1]

Measured on the 2-core, 24 GiB development host (``--threads 1``, prompt
1024, completion 128; step peak = RSS high-water minus RSS before the step):

    G  naive             prefix           prefix-split     naive-accum
    2  5715 MiB           3308 MiB (0.58x)
    3  8390 MiB  42.1 s   4286 MiB 18.5 s (0.51x mem, 0.44x CPU)
    4 10838 MiB  62.0 s   4685 MiB 20.8 s  3706 MiB 20.7 s  (0.43x / 0.34x; split 0.34x / 0.33x)
    8  > 16.9 GiB (fails) 6916 MiB 29.4 s  3768 MiB 29.3 s   3612 MiB 94.7 s

With no memory limit (``--mem-limit-gb 0 --threads 2``, nothing else running, 2026-12-04) the naive
step does fit at G=8, just: 19522 MiB and 190.0 s CPU, against 6932 MiB / 58.4 s for the resident
prefix (0.36x memory, 0.31x time) and 3725 MiB / 54.8 s split (0.19x, 0.29x).
Losses agree to 1e-7 and gradient norms to 1e-6 relative in fp32.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


VARIANTS = ("naive", "prefix", "prefix-split", "naive-accum")


def _samples(vocab: int, prompt: int, group: int, completion: int):
    import torch

    from mindforge.update.samples import Sample

    gen = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, vocab, (prompt,), generator=gen).tolist()
    out = []
    for i in range(group):
        comp = torch.randint(3, vocab, (completion,), generator=gen).tolist()
        old = (-torch.rand(completion, generator=gen) * 4).tolist()
        ids = tuple(prompt_ids + comp)
        out.append(Sample(group=0, trajectory_id=f"s{i}", kind="answer", route="L2", ids=ids,
                          mask=(False,) * prompt + (True,) * completion, old_logprobs=(0.0,) * prompt + tuple(old),
                          advantage=(i % 2) - 0.5, temperature=1.0, top_p=1.0))
    return out


class _Peak:
    """RSS high-water of this process, sampled on a thread (psutil), while a block runs."""

    def __init__(self) -> None:
        import psutil

        self.proc, self.peak, self.stop = psutil.Process(), 0, threading.Event()

    def __enter__(self) -> Self:
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def child(args: argparse.Namespace) -> None:
    import torch

    if args.mem_limit_gb:  # fail with an allocation error rather than wake the OOM killer on a shared host
        limit = int(args.mem_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if args.threads:  # one thread: no OpenMP spin-waits inflating CPU time on a busy host
        torch.set_num_threads(args.threads)

    from mindforge.engine.registry import init_adapters, resolve_model
    from mindforge.settings import load_settings
    from mindforge.update.policy import TRAIN_ADAPTER, load_policy
    from mindforge.update.trainer import GRPOConfig, GRPOTrainer

    model = resolve_model("smollm2-135m-instruct", load_settings())
    with tempfile.TemporaryDirectory() as tmp:
        policy = load_policy(model, init_adapters(model, Path(tmp), routes=("L2",))["L2"])
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for n, p in policy.named_parameters():
            if "lora_B" in n and TRAIN_ADAPTER in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    split = 2 if args.variant == "prefix-split" else None
    micro = 1 if args.variant == "naive-accum" else args.group
    trainer = GRPOTrainer(policy, GRPOConfig(loss_type="dapo", logit_chunk=args.chunk, micro_batch_size=micro,
                                             min_prefix_tokens=1, suffix_batch_size=split))
    samples = _samples(policy.config.vocab_size, args.prompt, args.group, args.completion)
    with _Peak() as peak:
        start, cpu0 = time.perf_counter(), time.process_time()
        loss = trainer.loss_and_grads(samples, resident=args.variant.startswith("prefix"))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    grads = [p.grad for p in trainer.params if p.grad is not None]
    print(json.dumps({
        "variant": args.variant, "seconds": seconds, "cpu_seconds": cpu, "loss": loss,
        "grad_norm": float(torch.nn.utils.get_total_norm(grads)),
        "step_peak_mb": (peak.peak - peak.base) / 2**20, "peak_rss_mb": peak.peak / 2**20,
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--completion", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--mem-limit-gb", type=float, default=None,
                    help="address-space limit of each variant (default: 80%% of the memory available now; 0: none)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of each variant (0: torch's default)")
    ap.add_argument("--variants", default="naive,prefix,prefix-split", help=f"comma-separated, of {VARIANTS}")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mem_limit_gb is None:  # the naive step at the default size wants ~20 GB: fail it, not the host
        import psutil

        args.mem_limit_gb = round(0.8 * psutil.virtual_memory().available / 2**30, 1)
    if args.variant:
        child(args)
        return
    print(f"GRPO step, default model fp32, prompt {args.prompt}, G={args.group}, completion {args.completion}, "
          f"head chunk {args.chunk}", flush=True)
    rows = {}
    for variant in args.variants.split(","):
        cmd = [sys.executable, __file__, "--variant", variant, "--prompt", str(args.prompt),
               "--group", str(args.group), "--completion", str(args.completion), "--chunk", str(args.chunk),
               "--mem-limit-gb", str(args.mem_limit_gb), "--threads", str(args.threads)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            why = "out of memory" if "can't allocate memory" in done.stderr else f"exit {done.returncode}"
            print(f"{variant:>12}: failed ({why}, limit {args.mem_limit_gb} GiB)\n{done.stderr[-600:]}", flush=True)
            continue
        rows[variant] = r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{variant:>12}: {r['cpu_seconds']:8.1f} s CPU ({r['seconds']:.1f} s wall)   step peak "
              f"{r['step_peak_mb']:8.0f} MiB   process peak {r['peak_rss_mb']:8.0f} MiB   loss {r['loss']:.8f}   "
              f"grad norm {r['grad_norm']:.6e}", flush=True)
    n = rows.get("naive")
    for name in ("prefix", "prefix-split"):
        p = rows.get(name)
        if n is None or p is None:
            continue
        print(f"{name}/naive: loss rel diff {abs(p['loss'] - n['loss']) / abs(n['loss']):.2e}, grad norm rel diff "
              f"{abs(p['grad_norm'] - n['grad_norm']) / n['grad_norm']:.2e}; memory "
              f"{p['step_peak_mb'] / n['step_peak_mb']:.2f}x (goal <= 0.4x), time "
              f"{p['cpu_seconds'] / n['cpu_seconds']:.2f}x CPU, {p['seconds'] / n['seconds']:.2f}x wall (goal <= 0.6x)")


if __name__ == "__main__":
    main()
