"""What a run asked of a host beyond an audit (issue 45): a bench judged against the host's
baseline or recorded as one, a knob's A/B, a split sweep, a stability watch, a placement plan
and its proof. The registered checks of a run
(``meta.check_of_run``) read it with the host's facts and past; an audit asks nothing
(``NOTHING``), and those checks then give no result. A frozen value made by the use case from
the command line, so the verdict is judged once, in the registry, and no use case appends a
verdict to a finished report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from omni_host.model import InferenceServer
from omni_host.outcome import FirstRun

if TYPE_CHECKING:
    from omni_host.plan.knobs import Knob


@dataclass(frozen=True)
class KnobAsked:
    knob: Knob
    value: str  # the value its A/B tries
    now: str | None  # the host's own value in its llama-bench args (None: llama-bench's default)


@dataclass(frozen=True)
class SweepAsked:
    advised: tuple[int, ...]  # the split the sweep's configurations are held against
    dropped: tuple[tuple[int, ...], ...] = ()  # configurations left out, and why, said


@dataclass(frozen=True)
class Factor:
    """One thing that differs from the baseline: its name as said, the baseline's value and
    the current one (None: unset / llama-bench's default), and how it is set back for one run
    (an option, a variable, a knob's file, the CPUs) or why it cannot be."""

    name: str
    then: str | None
    now: str | None
    option: str | None = None  # llama-bench's option that sets it back
    variable: str | None = None  # the environment variable that sets it back
    path: str | None = None  # the knob's file that sets it back (written, then restored)
    cpus: str | None = None  # the CPUs its arm's llama-bench runs on (a kernel's list)
    cannot: str | None = None  # why it cannot be set back, and what would prove it

    @property
    def arm(self) -> str:
        return f"{self.name} back"

    def shown(self, value: str | None) -> str:
        return value if value is not None else "unset" if self.variable else "its default"

    def line(self) -> str:
        return f"{self.name}: {self.shown(self.then)} -> {self.shown(self.now)}"


@dataclass(frozen=True)
class WhyAsked:
    measured: tuple[Factor, ...]  # the factors set back, one arm each (measure.why)
    left: tuple[Factor, ...] = ()  # the factors not set back: cannot be, or past the budget


@dataclass(frozen=True)
class Sample:
    """One round of a watch: the servers as the serve helper saw them."""

    at: float  # seconds since the epoch
    servers: tuple[InferenceServer, ...]
    error: str | None = None  # the host did not answer this round


@dataclass(frozen=True)
class WatchAsked:
    samples: tuple[Sample, ...]  # the servers as each round saw them, in time order
    interrupted: bool = False  # the window was cut short (Ctrl-C, SIGTERM)
    window_s: float | None = None  # the window asked for


@dataclass(frozen=True)
class PlanAsked:
    ctx: int = 4096  # the context the server will serve: what the KV cache must hold
    depth: int = 0  # the context a generated token reads (llama-bench -d) in the proof


@dataclass(frozen=True)
class ProofAsked:
    keys: tuple[str, ...] = ()  # the plan's candidates measured, chosen from its first verdict
    error: str | None = None  # why the proof was not collected (the host did not answer)


@dataclass(frozen=True)
class Asked:
    bench: bool = False  # a bench run: perf.tokens-per-s judges it
    record: bool = False  # ... asked to become the host's baseline (--baseline)
    first: FirstRun | None = None  # the first run's verdicts, when this is the second
    knob: KnobAsked | None = None  # an A/B of one knob: perf.knob judges it
    sweep: SweepAsked | None = None  # a split sweep: perf.split-sweep judges it
    why: WhyAsked | None = None  # each change since the baseline set back: perf.why judges it
    watch: WatchAsked | None = None  # a stability watch's rounds: serve.stability judges them
    plan: PlanAsked | None = None  # a placement plan: perf.placement judges it
    proof: ProofAsked | None = None  # ... and its proof: perf.placement-proof judges it

    @property
    def measures(self) -> bool:
        """Whether the run measured something (the bench helper's output is to be read)."""
        return self.bench or any(a is not None for a in (self.knob, self.sweep, self.plan,
                                                          self.why))


NOTHING = Asked()


class RunRefused(Exception):  # noqa: N818 (a refusal, not an error of ours)
    """The bench helper refused to run (a busy host, a missing binary or model): nothing was
    measured, so nothing is judged or stored; the use case says why."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} refused: {why}")
        self.what = what
        self.why = why
