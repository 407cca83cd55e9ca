"""Rules and words that the registered checks share with the judges outside the registry (the
Strategic layer, the split sweep): each in one place, so that no judge imports the check
registry and the registry may import every judge (no import circle inside ``evaluate``)."""

from __future__ import annotations

GIB = 1024 ** 3
# Above this VRAM ratio between the largest and smallest GPU, a symmetric split wastes memory
# (gpu.topology's rule, and the Strategic layer's).
ASYMMETRY_RATIO = 1.2


def tensor_split(vram_mib: list[int]) -> list[int]:
    """Percentages proportional to VRAM that sum to 100 (largest remainder): 96+32 -> 75,25."""
    total = sum(vram_mib)
    raw = [v * 100 / total for v in vram_mib]
    split = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - split[i], reverse=True)[:100 - sum(split)]:
        split[i] += 1
    return split


def size_text(n: float) -> str:
    """A size as an operator reads it: 127 MiB, 1.7 GiB, 404 GiB (a 127 MiB model was
    "0 GiB")."""
    if n < 1024 ** 2:
        return f"{n / 1024:,.0f} KiB" if n >= 1024 else f"{n:,.0f} bytes"
    if n < GIB:
        return f"{n / 1024 ** 2:,.0f} MiB"
    return f"{n / GIB:,.1f} GiB" if n < 10 * GIB else f"{n / GIB:,.0f} GiB"
