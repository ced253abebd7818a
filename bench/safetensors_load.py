#!/usr/bin/env python3
"""Model weights from safetensors files into GPU memory: kvik.safetensors.load_file next to
safetensors.torch.load_file, fastsafetensors and dd, on a synthetic checkpoint shaped like a
transformer (292 bf16 tensors, from a few KiB of norms to an embedding of about 480 MiB at 8G),
as one file and as 4 shards with an index.

    python3 bench/safetensors_load.py [--size 8G] [--dir /var/tmp/st] [--repeat 5] [--flow]

Contenders, each pass in a fresh subprocess (its peak host memory is its own, VmHWM):
  safetensors        safetensors.torch.load_file(path, device="cuda:0"), shard after shard
  fst-direct         fastsafetensors 16 threads, bounce buffers (nogds), its default O_DIRECT
  fst-buffered       the same, FASTSAFETENSORS_ODIRECT=0
  kvik               kvik.safetensors.load_file(path, device="cuda:0")
  kvik-direct        the same with direct_io=True (O_DIRECT for what the page cache lacks)
Each is timed from opening the file to the last tensor usable (torch.cuda.synchronize()), after
imports and CUDA's start. Warm: the files' pages cached (an untimed pass first), the median of
--repeat passes. Cold: each file's pages dropped before the pass (sync, then
posix_fadvise(DONTNEED); the pages still resident after are printed), the median of --cold-repeat
passes, with `dd iflag=direct` and buffered `dd` of the one file as baselines, and where fio is
on PATH, fio's sequential read of it with O_DIRECT (io_uring, 16 reads of 4 MiB in flight) and
buffered (psync, 16 MiB calls). The cold passes of all of them take turns, round after round, in
an order that moves each round, so that a disk whose rate drifts during the run favours none.
CPU s/GB: the child's user+system time over the load, per GB of tensor data.

Last, issue 28's two targets for kvik at its defaults, each "met" or "missed": warm, at least
50 GB/s; cold, at least the fastest of the other contenders, dd and fio.

--device cpu: PyTorch tensors on the host (safetensors maps the file there: no copy to time).
--framework numpy: the same on the host with NumPy arrays (safetensors.numpy, kvik with
framework "numpy"; no fastsafetensors; F16 in place of bf16, which safetensors.numpy lacks), a
smoke run for machines without a GPU.
--flow: a Llama model built from a config (about 0.65 GB of bf16, nothing downloaded) saved by
save_pretrained, then model.load_state_dict(load_file(...)) through kvik and through safetensors.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

GB = 1e9
LAYERS = 32


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


# ---- the checkpoint ---------------------------------------------------------------------------


def layout(size):
    """[(name, shape)] of a Llama-like model of about `size` bytes of bf16: 32 layers of q, k, v,
    o (grouped KV: k and v a quarter of q), gate, up, down (3.5 x hidden) and two norms, the
    embedding and lm_head (vocabulary 26.7 x hidden), the final norm and a 2048-element tensor:
    292 tensors."""
    hidden = max(64, round(math.sqrt(size / 938.7) / 64) * 64)
    vocab, inter, kv = round(hidden * 26.67 / 64) * 64, hidden * 7 // 2, hidden // 4
    tensors = [("model.embed_tokens.weight", [vocab, hidden])]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors += [(p + "self_attn.q_proj.weight", [hidden, hidden]),
                    (p + "self_attn.k_proj.weight", [kv, hidden]),
                    (p + "self_attn.v_proj.weight", [kv, hidden]),
                    (p + "self_attn.o_proj.weight", [hidden, hidden]),
                    (p + "mlp.gate_proj.weight", [inter, hidden]),
                    (p + "mlp.up_proj.weight", [inter, hidden]),
                    (p + "mlp.down_proj.weight", [hidden, inter]),
                    (p + "input_layernorm.weight", [hidden]),
                    (p + "post_attention_layernorm.weight", [hidden])]
    tensors += [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden]),
                ("model.rotary_emb.inv_freq", [2048])]
    return tensors


def write_safetensors(path, tensors, block, dtype):
    """A safetensors file of 2-byte `tensors` (`dtype` BF16 or F16), laid out as
    safetensors.torch.save_file does (one dtype: sorted by name), its data the random `block`
    repeated, written as it goes."""
    header, at = {}, 0
    for name, shape in sorted(tensors):
        nbytes = 2 * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        left = at
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
    return at


def make_checkpoint(directory, size, dtype):
    """The one file and the 4 shards (with their index) in `directory`, made unless there."""
    tensors = layout(size)
    one = os.path.join(directory, "model.safetensors")
    sharded = os.path.join(directory, "sharded")
    stamp = os.path.join(directory, "layout.json")
    if os.path.exists(stamp) and json.load(open(stamp)) == [dtype, tensors]:
        return one, sharded, tensors
    os.makedirs(sharded, exist_ok=True)
    block = os.urandom(64 << 20)
    write_safetensors(one, tensors, block, dtype)
    total = sum(2 * math.prod(s) for _, s in tensors)
    groups, at, weight_map = [[] for _ in range(4)], 0, {}
    for name, shape in tensors:  # in model order, a quarter of the bytes each
        groups[min(3, int(4 * at / total))].append((name, shape))
        at += 2 * math.prod(shape)
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-00004.safetensors"
        write_safetensors(os.path.join(sharded, file), group, block, dtype)
        weight_map.update({name: file for name, _ in group})
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(stamp, "w") as f:
        json.dump([dtype, tensors], f)
    return one, sharded, tensors


def files_of(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    return [path]


# ---- a pass, in a child ------------------------------------------------------------------------


def load(contender, path, framework, device):
    """The tensors of `path` (a file or a sharded directory) by `contender`, usable."""
    files = files_of(path)
    direct_io = True if contender == "kvik-direct" else None
    if framework == "numpy":
        if contender.startswith("kvik"):
            import kvik.safetensors

            return kvik.safetensors.load_file(path, framework="numpy", direct_io=direct_io)
        from safetensors.numpy import load_file

        return {k: v for f in files for k, v in load_file(f).items()}
    import torch

    if contender.startswith("kvik"):
        import kvik.safetensors

        out = kvik.safetensors.load_file(path, device=device, direct_io=direct_io)
    elif contender == "safetensors":
        from safetensors.torch import load_file

        out = {k: v for f in files for k, v in load_file(f, device=device).items()}
    else:  # fastsafetensors; FASTSAFETENSORS_ODIRECT set by the parent
        from fastsafetensors import SafeTensorsFileLoader

        loader = SafeTensorsFileLoader(None, device, nogds=True, max_threads=16)
        loader.add_filenames({0: files})
        buffers = loader.copy_files_to_device()
        out = {k: buffers.get_tensor(k) for k in loader.get_keys()}
        buffers.close()
        loader.close()
    if device != "cpu":
        torch.cuda.synchronize()
    return out


def peak_mib():
    """This process's peak resident memory: VmHWM, which exec starts anew (ru_maxrss keeps the
    parent's peak across fork and exec)."""
    with open("/proc/self/status") as f:
        kib = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    return int(kib) / 1024


def child(args):
    import resource

    # Imports and CUDA's start, outside the time.
    import kvik.safetensors  # noqa: F401
    import numpy  # noqa: F401

    if args.framework == "numpy":
        import safetensors.numpy  # noqa: F401
    else:
        import safetensors.torch  # noqa: F401
        import torch

        torch.zeros(1, device=args.device)
        if args.child.startswith("fst"):
            import fastsafetensors  # noqa: F401
    base, before = peak_mib(), resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    tensors = load(args.child, args.path, args.framework, args.device)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    nbytes = sum(t.nbytes for t in tensors.values())
    print(json.dumps({"seconds": seconds, "bytes": nbytes, "tensors": len(tensors),
                      "cpu": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                      "base_mib": base, "peak_mib": peak_mib()}))


def run_child(contender, path, args, env=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", contender, "--path", path,
           "--framework", args.framework, "--device", args.device]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"{contender} on {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


# ---- the parent --------------------------------------------------------------------------------


def drop_pages(files):
    """Drop every file's cached pages; the fraction still resident after."""
    os.sync()
    resident = total = 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        r, t = page_cache_info(path)
        resident, total = resident + r, total + t
    return resident / total if total else 0.0


def page_cache_info(path):
    import kvik

    return kvik.get_page_cache_info(path)


def dd(path, direct):
    flags = ["iflag=direct"] if direct else []
    start = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M", *flags], check=True,
                   capture_output=True)
    return os.path.getsize(path) / (time.perf_counter() - start) / GB


def fio(path, direct):
    """fio's sequential read of `path`, in GB/s: O_DIRECT through io_uring with 16 reads of 4 MiB in
    flight, or buffered through psync in 16 MiB calls (what dd does). The pages are left as they
    are (--invalidate=0): the caller dropped them."""
    engine = ["--ioengine=io_uring", "--iodepth=16", "--bs=4M"] if direct else [
        "--ioengine=psync", "--bs=16M"]
    done = subprocess.run(["fio", "--name=cold", f"--filename={path}", "--readonly", "--rw=read",
                           f"--direct={int(direct)}", "--invalidate=0", "--output-format=json",
                           *engine], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)["jobs"][0]["read"]["bw_bytes"] / GB


def baselines(one):
    """[(label, read)] of dd and fio reading the one file: read() gives its GB/s."""
    readers = [("dd iflag=direct", lambda: dd(one, True)),
               ("dd (buffered)", lambda: dd(one, False))]
    if shutil.which("fio"):
        readers += [("fio O_DIRECT, io_uring", lambda: fio(one, True)),
                    ("fio buffered", lambda: fio(one, False))]
    else:
        print("# fio skipped: not on PATH (bench/fio_static.sh builds one)")
    return readers


def cold_passes(readers, rounds):
    """{label: ([GB/s], [fraction still resident])} of `readers`, [(label, files, read)] whose
    read() reads the files once and gives its GB/s, each read after the files' pages were dropped.
    They take turns for `rounds` rounds, each round starting one later and every other one
    reversed."""
    out = {label: ([], []) for label, _, _ in readers}
    for r in range(rounds):
        order = readers[r % len(readers):] + readers[:r % len(readers)]
        for label, files, read in order if r % 2 == 0 else reversed(order):
            out[label][1].append(drop_pages(files))
            out[label][0].append(read())
    return out


def verdict(results, cold_baselines):
    """Issue 28's targets for kvik at its defaults (the contender "kvik"), one line each."""
    mine = {label: r for label, r in results.items() if label.split(" (")[0] == "kvik"}
    if not mine:
        return
    warm = min(r["warm"] for r in mine.values())
    print(f"target warm: kvik at least 50 GB/s: {warm:.2f} at worst: "
          f"{'met' if warm >= 50 else 'missed'}")
    others = {label: r["cold"] for label, r in results.items()
              if not label.startswith("kvik") and not math.isnan(r["cold"])}
    others.update(cold_baselines)
    if not others or any(math.isnan(r["cold"]) for r in mine.values()):
        return
    best = max(others, key=others.get)
    cold = min(r["cold"] for r in mine.values())
    print(f"target cold: kvik at least the fastest other, {best} {others[best]:.2f}: kvik "
          f"{cold:.2f} at worst: {'met' if cold >= others[best] else 'missed'}")


def importable(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def contenders(framework):
    if framework == "numpy":
        return {"safetensors": {}, "kvik": {}, "kvik-direct": {}}
    out = {"safetensors": {}, "fst-direct": {"FASTSAFETENSORS_ODIRECT": "1"},
           "fst-buffered": {"FASTSAFETENSORS_ODIRECT": "0"}, "kvik": {}, "kvik-direct": {}}
    missing = importable("fastsafetensors")
    if missing:
        print(f"# fastsafetensors skipped: not importable ({missing})")
        del out["fst-direct"], out["fst-buffered"]
    return out


def measure_warm(name, env, path, args):
    """The warm passes of `name` on `path`, after an untimed one."""
    run_child(name, path, args, env)  # untimed: the pages cached, the code warm
    return [run_child(name, path, args, env) for _ in range(args.repeat)]


def summary(warm, cold, rates, resident):
    """A contender's row: `warm` and `cold` its passes, `rates` the cold passes' GB/s."""
    nbytes = warm[0]["bytes"]
    runs = warm + cold
    return {"warm": nbytes / statistics.median(r["seconds"] for r in warm) / GB,
            "cold": statistics.median(rates) if rates else float("nan"),
            "cpu": statistics.median(r["cpu"] for r in runs) / (nbytes / GB),
            "peak": max(r["peak_mib"] for r in runs),
            "base": statistics.median(r["base_mib"] for r in warm),
            "resident": max(resident, default=0.0), "tensors": warm[0]["tensors"]}


def flow(args):
    """A small transformers model's load_state_dict, through kvik and through safetensors."""
    directory = os.path.join(args.dir, "flow")
    code = """
import json, os, sys, time, torch, transformers
config = transformers.LlamaConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=16,
                                  num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
directory, how, device = sys.argv[1], sys.argv[2], sys.argv[3]
path = os.path.join(directory, "model.safetensors")
if how == "save":
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
    sys.exit(0)
sync = torch.cuda.synchronize if device != "cpu" else lambda: None
with torch.device(device):
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
sync()
if how == "kvik":
    import kvik.safetensors
    load = lambda: kvik.safetensors.load_file(path, device=device)
else:
    import safetensors.torch
    load = lambda: safetensors.torch.load_file(path, device=device)
start = time.perf_counter()
model.load_state_dict(load())
sync()
print(json.dumps({"seconds": time.perf_counter() - start, "bytes": os.path.getsize(path)}))
"""
    os.makedirs(directory, exist_ok=True)
    if not os.path.exists(os.path.join(directory, "model.safetensors")):
        subprocess.run([sys.executable, "-c", code, directory, "save", "cpu"], check=True)
    print("\nmodel.load_state_dict(load_file(...)), a Llama of "
          f"{os.path.getsize(os.path.join(directory, 'model.safetensors')) / GB:.2f} GB, warm:")
    for how in ("safetensors", "kvik"):
        runs = []
        for i in range(args.repeat + 1):
            done = subprocess.run([sys.executable, "-c", code, directory, how, args.device],
                                  check=True, capture_output=True, text=True)
            runs.append(json.loads(done.stdout.splitlines()[-1])["seconds"])
        print(f"  {how:12s} {statistics.median(runs[1:]) * 1e3:8.1f} ms (median of {args.repeat})")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=size_arg, default=8 << 30)
    parser.add_argument("--dir", default="/var/tmp/st")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold-repeat", type=int, default=3)
    parser.add_argument("--no-cold", action="store_true")
    parser.add_argument("--framework", choices=["torch", "numpy"], default="torch")
    parser.add_argument("--device", default="cuda:0", help="PyTorch's device (cpu: a smoke run)")
    parser.add_argument("--only", help="comma-separated contenders to run")
    parser.add_argument("--flow", action="store_true", help="the transformers flow only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    os.makedirs(args.dir, exist_ok=True)
    if args.flow:
        return flow(args)
    # safetensors.numpy has no bfloat16: F16 there, of the same sizes.
    dtype = "F16" if args.framework == "numpy" else "BF16"
    one, sharded, tensors = make_checkpoint(args.dir, args.size, dtype)
    sizes = sorted(2 * math.prod(s) for _, s in tensors)
    print(f"# {len(tensors)} {dtype} tensors, {sizes[0]} B to {sizes[-1] / (1 << 20):.0f} MiB, "
          f"{os.path.getsize(one) / GB:.2f} GB; framework {args.framework}, device "
          f"{'cpu' if args.framework == 'numpy' else args.device}; {args.dir}")
    chosen = contenders(args.framework)
    print(f"{'contender':24s} {'warm GB/s':>9s} {'cold GB/s':>9s} {'CPU s/GB':>8s} "
          f"{'peak MiB':>8s} {'base MiB':>8s} {'resident':>8s}")
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    warm, cold, readers = {}, {}, []
    for name, env in chosen.items():
        for label, path in ((name, one), (name + " (4 shards)", sharded)):
            warm[label] = measure_warm(name, env, path, args)
            assert warm[label][0]["tensors"] == len(tensors), (label, warm[label][0]["tensors"])
            cold[label] = []

            def read(label=label, name=name, path=path, env=env):
                cold[label].append(run_child(name, path, args, env))
                return cold[label][-1]["bytes"] / cold[label][-1]["seconds"] / GB

            readers.append((label, files_of(path), read))
    baseline_readers = [] if args.no_cold else baselines(one)
    readers += [(label, [one], read) for label, read in baseline_readers]
    passes = cold_passes(readers, 0 if args.no_cold else args.cold_repeat)
    results = {label: summary(warm[label], cold[label], *passes[label]) for label in warm}
    for label, r in results.items():
        print(f"{label:24s} {r['warm']:9.2f} {r['cold']:9.2f} {r['cpu']:8.3f} "
              f"{r['peak']:8.0f} {r['base']:8.0f} {r['resident']:7.1%}")
    cold_baselines = {}
    for label, _ in baseline_readers:
        rates, resident = passes[label]
        cold_baselines[label] = statistics.median(rates)
        print(f"{label:24s} {'':9s} {cold_baselines[label]:9.2f} {'':8s} {'':8s} {'':8s} "
              f"{max(resident):7.1%}")
    print("# base MiB: the child's peak before loading (imports, CUDA); resident: the largest "
          "fraction of pages\n# still cached after dropping them, before a cold pass")
    if args.framework == "torch" and args.device != "cpu":
        verdict(results, cold_baselines)


if __name__ == "__main__":
    sys.exit(main())
