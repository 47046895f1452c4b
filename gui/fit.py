"""Will it fit: a model's sizes against this machine's memory, disk and GPU (no Qt).

The model card and the Convert page say in words which precision this machine can run
and warn before a conversion that would run out of memory or disk.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from mmforge.backend.inspect import Sizes
from mmforge.backend.units import human_bytes

# Best first: the precision closest to the original that fits is the one recommended.
BEST_FIRST = ("f32", "f16", "int8", "int4")
# The model shares the memory with the system and the other programs.
USABLE_SHARE = 0.8

# What each precision means, in words (item 12).
MEANING = {
    # Sizes against f32's, the same yardstick for each (the table gives the real sizes).
    "f32": "full precision: the original model exactly, the largest",
    "f16": "half precision: about half of f32's size, nearly always the same answers",
    "int8": "8-bit: the language part at a quarter of its f32 size, answers very close",
    "int4": "4-bit: the language part at about an eighth of its f32 size, slightly "
    "different answers",
}

CPU_CUDA = (
    "CPU runs on any computer's processor. CUDA runs on an NVIDIA graphics card (GPU), "
    "much faster, and needs one with its driver where the package is used."
)


@dataclass(frozen=True)
class Machine:
    """What this computer has; None where the platform does not say."""

    memory_bytes: int | None
    available_bytes: int | None
    disk_free_bytes: int | None
    has_gpu: bool


def total_memory_bytes() -> int | None:
    """Physical memory (None: unknown): sysconf, or Windows' GlobalMemoryStatusEx."""
    from mmforge.backend.memory import total_bytes

    return total_bytes()


def disk_free_bytes(folder: Path) -> int | None:
    """Free disk where `folder` is or will be (its nearest existing parent)."""
    where = folder
    while not where.exists() and where.parent != where:
        where = where.parent
    try:
        return shutil.disk_usage(where).free
    except OSError:
        return None


def has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible (its driver or its tool)."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def this_machine(folder: Path) -> Machine:
    """This computer, with the disk of `folder` (where packages go)."""
    from mmforge.backend.memory import available_bytes

    return Machine(total_memory_bytes(), available_bytes(), disk_free_bytes(folder), has_gpu())


def fits_memory(sizes: Sizes, dtype: str, machine: Machine) -> bool | None:
    """Whether `dtype`'s runtime memory fits this machine's memory (None: unknown)."""
    need = sizes.memory_bytes.get(dtype)
    if not need or not machine.memory_bytes:
        return None
    return need <= machine.memory_bytes * USABLE_SHARE


def recommendation(sizes: Sizes, machine: Machine) -> str:
    """One sentence: the precision to choose here, and why ('int4 fits: 3.1 GB of …')."""
    offered = [d for d in BEST_FIRST if d in sizes.memory_bytes]
    if not offered or not machine.memory_bytes:
        return ""
    ram = human_bytes(machine.memory_bytes)
    best = next((d for d in offered if fits_memory(sizes, d, machine)), None)
    if best is None:
        smallest = min(offered, key=lambda d: sizes.memory_bytes[d])
        return (
            f"Too big for this computer: even {smallest} needs "
            f"{human_bytes(sizes.memory_bytes[smallest])} of memory and it has {ram}. "
            "Convert it here for a larger machine, or pick a smaller model."
        )
    text = f"{best} fits: {human_bytes(sizes.memory_bytes[best])} of your {ram} memory"
    better = [d for d in offered if offered.index(d) < offered.index(best)]
    if better:
        text += f" ({better[-1]} would need {human_bytes(sizes.memory_bytes[better[-1]])})"
    text += "."
    disk = machine.disk_free_bytes
    package = sizes.package_bytes.get(best, 0)
    if disk is not None and package > disk:
        text += (
            f" Its package ({human_bytes(package)}) is more than the free disk "
            f"({human_bytes(disk)})."
        )
    return text


def conversion_problems(sizes: Sizes, dtype: str, machine: Machine, download: bool) -> list[str]:
    """Why converting to `dtype` here would run out of memory or disk (empty: it fits)."""
    problems = []
    peak = sizes.convert_peak_by_dtype.get(dtype) or sizes.convert_peak_bytes
    if peak and machine.memory_bytes and peak > machine.memory_bytes * USABLE_SHARE:
        problems.append(
            f"Converting needs about {human_bytes(peak)} of memory; this computer has "
            f"{human_bytes(machine.memory_bytes)}."
        )
    disk_need = sizes.package_bytes.get(dtype, 0) + (sizes.checkpoint_bytes if download else 0)
    if machine.disk_free_bytes is not None and disk_need > machine.disk_free_bytes:
        what = "the download and the package need" if download else "the package needs"
        problems.append(
            f"{what[0].upper()}{what[1:]} about {human_bytes(disk_need)} of disk; "
            f"{human_bytes(machine.disk_free_bytes)} is free there."
        )
    return problems


def precision_words(dtype: str, sizes: Sizes | None) -> str:
    """'int4: 3.5 GB package — 4-bit: about a third of the size, slightly different answers'."""
    meaning = MEANING.get(dtype, dtype)
    size = sizes.package_bytes.get(dtype) if sizes is not None else None
    if size:
        return f"{dtype}: a {human_bytes(size)} package — {meaning}."
    return f"{dtype}: {meaning}."
