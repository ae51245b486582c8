"""Which compiled candidates are worth timing, decided from their resource usage alone.

A candidate is dropped before it costs any GPU time when it cannot run (its registers or shared
memory exceed what one block may use on the target, so not one block fits on a multiprocessor) or
when it spills registers to local memory while another candidate does not (spilling kernels are
slow; if every candidate spills, none is dropped for it).  The theoretical occupancy (blocks and
warps per SM) is computed for the report.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    keep: bool
    reason: str = ""
    blocks_per_sm: int = 0
    warps_per_sm: int = 0


def occupancy(resources: dict, num_threads: int, target) -> tuple[int, int]:
    """(blocks per SM, warps per SM) by registers, shared memory and threads; 0 blocks = cannot run."""
    warps = -(-num_threads // target.warp_size)
    regs = int(resources.get("registers", 0) or 0)
    smem = int(resources.get("shared_bytes", 0) or 0)
    by_threads = (2048 if target.vendor == "nvidia" else 2560) // max(num_threads, 1)
    by_regs = target.register_file_per_sm // max(regs * warps * target.warp_size, 1) if regs else by_threads
    shared_per_sm = max(target.max_shared_bytes, 1)  # the per-block limit is the per-SM pool on our targets
    by_smem = shared_per_sm // smem if smem else by_threads
    blocks = max(0, min(by_threads, by_regs, by_smem, 32))
    return blocks, blocks * warps


def judge(candidates: list, target) -> list[Verdict]:
    """``candidates``: (resources dict, num_threads) per compiled configuration."""
    verdicts = []
    for res, threads in candidates:
        blocks, warps = occupancy(res, threads, target)
        if int(res.get("shared_bytes", 0) or 0) > target.max_shared_bytes:
            verdicts.append(Verdict(False, f"needs {res['shared_bytes']} B of shared memory; the target allows "
                                           f"{target.max_shared_bytes}", blocks, warps))
        elif blocks == 0:
            verdicts.append(Verdict(False, "not one block fits on a multiprocessor (registers x threads)", 0, 0))
        else:
            verdicts.append(Verdict(True, "", blocks, warps))
    spill_free = [v.keep and not _spills(res) for v, (res, _) in zip(verdicts, candidates)]
    if any(spill_free):
        for v, (res, _) in zip(verdicts, candidates):
            if v.keep and _spills(res):
                v.keep, v.reason = False, f"spills {_spills(res)} bytes to local memory (others do not)"
    return verdicts


def _spills(res: dict) -> int:
    return int(res.get("spills", 0) or 0) + int(res.get("spill_bytes", 0) or 0)
