"""The benchmark on the audited host: llama-bench behind an idle gate, with the host state
that moves tokens/s read around it.

Run by the collector, after every other probe, as ``python3 -c <this file> --llama-bench PATH
--model PATH --repetitions N --budget-s S --max-busy-pct P [--force] -- ARGS...``: the values
arrive as argv (never through a shell). It prints one JSON document:

* ``gate``: the GPUs' compute processes and utilisation just before; a busy GPU refuses the run
  (``refused``) unless ``--force``;
* ``context``: what llama-bench's own records lack: the CPUs this process may use (affinity and
  the cgroup CPU quota, v1 or v2), the load, the binary's and its libraries' sha256, the model's
  size and tensor table (GGUF header: which bytes each device reads per token), each GPU's
  link, power limit and clocks (nvidia-smi), memory bus and free memory (NVML, for the
  ceiling);
* ``run``: llama-bench's argv, exit, stdout (its ``-o json`` records) and the tail of stderr;
* ``during``: GPU clocks, power and clock-event reasons sampled while it ran, other processes
  on the GPUs, and the CPU time others used meanwhile.

llama-bench is this process's child, in the process group the collector kills at its deadline
or when the controller goes away: it never outlives the run. Standard library only, Python 3.6.
"""

import contextlib
import errno
import fcntl
import json
import os
import stat
import subprocess
import sys
import threading
import time

OUTPUT_CAP = 4 * 1024 * 1024
STDERR_LINES = 40
SAMPLE_EVERY_S = 1.0
# nvidia-smi --query-gpu fields, read with their header (an unknown field fails the query:
# the short list is the fallback for older drivers).
GPU_FIELDS = ("index,name,uuid,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
              "pcie.link.gen.gpumax,pcie.link.width.current,pcie.link.width.max,power.limit,"
              "power.default_limit,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,"
              "power.draw,temperature.gpu,utilization.gpu,memory.used,"
              "clocks_event_reasons.active")
GPU_FIELDS_OLD = ("index,name,uuid,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
                  "pcie.link.width.current,pcie.link.width.max,power.limit,clocks.max.sm,"
                  "clocks.max.mem,clocks.sm,clocks.mem,power.draw,utilization.gpu,memory.used")
SAMPLE_FIELDS = ("index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,"
                 "pcie.link.gen.current,pcie.link.width.current")
NVML_EVERY_S = 0.25  # a library call, not a process: often enough to see a link flap
MAX_SAMPLES = 1200
# One bench at a time on a host: two would measure each other (and both call themselves the
# first). Every user's helper takes this lock; the one that finds it held names its holder.
LOCK_NAME = "omni-host-bench.lock"  # in lock_dir(): a folder only the bench's user may write

if "Session" not in globals():  # imported as a module; on the host nvml_session.py comes first
    from omni_host.remote.nvml_session import Session
if "cpu_quota" not in globals():  # imported as a module; on the host procfacts.py comes first
    from omni_host.remote.procfacts import (  # noqa: F401 (tests reach _sha256 here)
        _read,
        _sha256,
        bench_env,
        cached_sha256,
        cpu_quota,
        model_identity,
    )
if "gguf_header" not in globals():  # likewise gguf.py
    from omni_host.remote.gguf import gguf_model_files, gguf_tensor_map
if "load_server" not in globals():  # likewise serverload.py
    from omni_host.remote.serverload import load_server, server_beside


def _args(argv):
    opts = {"force": False, "extra": []}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            opts["extra"] = argv[i + 1:]
            break
        if arg == "--force":
            opts["force"] = True
        elif arg == "--wait-go":
            opts["wait_go"] = True
        else:
            opts[arg.lstrip("-").replace("-", "_")] = argv[i + 1]
            i += 1
        i += 1
    return opts


def _smi(args, timeout_s=20):
    """(exit code, stdout, stderr) of nvidia-smi; (127, "", why) where there is none, (124,
    "", why) where it did not answer in time (a driver that hangs: not "no GPU")."""
    try:
        proc = subprocess.run(["nvidia-smi"] + args, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return 124, "", "no answer in %d s" % timeout_s
    except OSError as exc:
        return 127, "", str(exc)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def _csv_rows(text):
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split(",")]
    return [dict(zip(header, [c.strip() for c in line.split(",")]))  # noqa: B905 (Python 3.6)
            for line in lines[1:]]


def gpu_state():
    """Each GPU's state as nvidia-smi reports it (its own header names the fields), or
    {"error": why}; None without nvidia-smi."""
    code, out, err = _smi(["--query-gpu=" + GPU_FIELDS, "--format=csv"])
    if code != 0 and "not a valid field" in (out + err).lower():
        code, out, err = _smi(["--query-gpu=" + GPU_FIELDS_OLD, "--format=csv"])
    if code == 127 or code != 0 and "no devices were found" in (out + err).lower():
        return None  # no GPU here: a CPU host's bench has no GPU to wait for
    if code != 0:
        return {"error": (err or out).strip()[:300] or "exit %d" % code}
    return {"rows": _csv_rows(out)}


def compute_apps():
    code, out, _ = _smi(["--query-compute-apps=pid,process_name,used_memory", "--format=csv"])
    return _csv_rows(out) if code == 0 else None


class Nvml(Session):
    """The run's sampler on one NVML session, opened once for the helper's life: the run is
    sampled at the cost of a library call, where each nvidia-smi is a process that initialises
    NVML again (0.02-0.07 CPU-s on an H100). Raises OSError where NVML cannot be opened."""

    def __init__(self):
        import ctypes

        Session.__init__(self)
        self.ct = ctypes
        # renamed in driver 535 (clocks_event_reasons); the old name stays for older drivers
        self.reasons = self._first("nvmlDeviceGetCurrentClocksEventReasons",
                                   "nvmlDeviceGetCurrentClocksThrottleReasons")
        self.procs = self._first("nvmlDeviceGetComputeRunningProcesses_v3",
                                 "nvmlDeviceGetComputeRunningProcesses_v2")

    def _first(self, *names):
        for name in names:
            fn = getattr(self.lib, name, None)
            if fn is not None:
                return fn
        return None

    def memory(self):
        """Per GPU: memory bus width (bits) and maximum memory clock (MHz) (nvidia-smi does
        not print the bus width), and its memory free and total (llama.cpp's default -ts
        weighs what is free)."""
        found = []
        for i, handle in enumerate(self.handles):
            entry = {"index": i}
            width = self.uint("nvmlDeviceGetMemoryBusWidth", handle)
            clock = self.uint("nvmlDeviceGetMaxClockInfo", handle, 2)  # MEM
            if width is not None:
                entry["bus_width_bits"] = width
            if clock is not None:
                entry["max_mem_clock_mhz"] = clock
            memory = (self.ct.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used
            if self.lib.nvmlDeviceGetMemoryInfo(handle, self.ct.byref(memory)) == 0:
                entry["memory_free_bytes"] = memory[1]
                entry["memory_total_bytes"] = memory[0]
            found.append(entry)
        return found

    def sample(self):
        """(rows as nvidia-smi's SAMPLE_FIELDS print them without units, each GPU's clock
        event reasons as a hex mask, the compute processes as {pid: name}); None for what
        this driver's NVML cannot say (the processes: the caller asks nvidia-smi)."""
        rows, masks = [], []
        for i, h in enumerate(self.handles):
            now = self.now(h)
            power = now["power_mw"]
            values = [now["sm"], now["mem"], None if power is None else "%.2f" % (power / 1000.0),
                      now["temp"], now["util"], now["gen"], now["width"]]
            rows.append([str(i)] + ["[N/A]" if v is None else str(v) for v in values])
            if now["mask"] is not None:
                masks.append("0x%016x" % now["mask"])
        return rows, masks, self.processes()

    def now(self, h):
        """What moves under load, as NVML answers it: the SM and memory clocks (MHz), power
        (mW), the GPU's own temperature sensor, utilisation (%), the PCIe link's generation and
        width, the clock event reasons mask; None for what this driver does not answer."""
        ct = self.ct
        util = (ct.c_uint * 2)()  # nvmlUtilization_t: gpu, memory
        mask = ct.c_ulonglong()
        return {"sm": self.uint("nvmlDeviceGetClockInfo", h, 1),
                "mem": self.uint("nvmlDeviceGetClockInfo", h, 2),
                "power_mw": self.uint("nvmlDeviceGetPowerUsage", h),
                "temp": self.uint("nvmlDeviceGetTemperature", h, 0),
                "util": util[0] if self.lib.nvmlDeviceGetUtilizationRates(
                    h, ct.byref(util)) == 0 else None,
                "gen": self.uint("nvmlDeviceGetCurrPcieLinkGeneration", h),
                "width": self.uint("nvmlDeviceGetCurrPcieLinkWidth", h),
                "mask": mask.value if self.reasons is not None and self.reasons(
                    h, ct.byref(mask)) == 0 else None}

    def processes(self):
        """{pid: name} of the compute processes on every GPU; None where NVML cannot say."""
        apps = self.apps()
        return None if apps is None else dict((a["pid"], a["process_name"]) for a in apps)

    def apps(self):
        """The compute processes as ``nvidia-smi --query-compute-apps=pid,process_name,
        used_memory --format=csv`` lists them (a row per GPU it runs on); None where NVML
        cannot list them (more than 32 on a GPU, an older driver)."""
        if self.procs is None:
            return None
        ct, found = self.ct, []

        class Info(ct.Structure):  # nvmlProcessInfo_t (v2 and v3 alike)
            _fields_ = [("pid", ct.c_uint), ("usedGpuMemory", ct.c_ulonglong),
                        ("gpuInstanceId", ct.c_uint), ("computeInstanceId", ct.c_uint)]

        for handle in self.handles:
            count = ct.c_uint(32)
            infos = (Info * 32)()
            if self.procs(handle, ct.byref(count), infos) != 0:
                return None  # more than 32, or an error: nvidia-smi says it
            for info in infos[:count.value]:
                name = ct.create_string_buffer(256)
                got = self.lib.nvmlSystemGetProcessName(info.pid, name, 256) == 0
                used = info.usedGpuMemory
                found.append({"pid": str(info.pid),
                              "process_name": name.value.decode("utf-8", "replace") if got
                              else "?",
                              "used_gpu_memory [MiB]": "[N/A]" if used >= 2 ** 63
                              else "%d MiB" % (used // 2 ** 20)})
        return found

    def used_mib(self, h):
        """Memory used as nvidia-smi prints it: the _v2 call leaves the driver's reservation
        out (the first call counts it in)."""
        ct = self.ct

        class Memory2(ct.Structure):  # nvmlMemory_v2_t
            _fields_ = [("version", ct.c_uint), ("total", ct.c_ulonglong),
                        ("reserved", ct.c_ulonglong), ("free", ct.c_ulonglong),
                        ("used", ct.c_ulonglong)]

        two = Memory2(version=ct.sizeof(Memory2) | (2 << 24))
        if self.ok("nvmlDeviceGetMemoryInfo_v2", h, ct.byref(two)):
            return two.used // 2 ** 20
        one = (ct.c_ulonglong * 3)()  # nvmlMemory_t: total, free, used
        return one[2] // 2 ** 20 if self.ok("nvmlDeviceGetMemoryInfo", h, ct.byref(one)) else None

    def state(self):
        """What ``gpu_state`` reads with nvidia-smi (GPU_FIELDS), in its form: its header names,
        units and ``[N/A]``, so the gate, the context and a baseline read with nvidia-smi
        compare alike. None where nvidia-smi should say it (no GPU counted, a GPU lost)."""
        if not self.count or self.lost:
            return None
        rows = []

        def shown(value, form="%s"):
            return "[N/A]" if value is None else form % value

        def watts(milliwatts):
            return shown(None if milliwatts is None else milliwatts / 1000.0, "%.2f W")

        for i, h in enumerate(self.handles):
            pci = self.pci_info(h)
            now = self.now(h)
            rows.append({
                "index": str(i), "name": shown(self.text("nvmlDeviceGetName", h)),
                "uuid": shown(self.text("nvmlDeviceGetUUID", h)),
                "pci.bus_id": shown(pci.busId.decode("ascii", "replace") if pci else None),
                "pcie.link.gen.current": shown(now["gen"]),
                "pcie.link.gen.max": shown(self.uint("nvmlDeviceGetMaxPcieLinkGeneration", h)),
                "pcie.link.gen.gpumax": shown(self.uint("nvmlDeviceGetGpuMaxPcieLinkGeneration", h)),
                "pcie.link.width.current": shown(now["width"]),
                "pcie.link.width.max": shown(self.uint("nvmlDeviceGetMaxPcieLinkWidth", h)),
                "power.limit [W]": watts(self.uint("nvmlDeviceGetPowerManagementLimit", h)),
                "power.default_limit [W]": watts(
                    self.uint("nvmlDeviceGetPowerManagementDefaultLimit", h)),
                "clocks.max.sm [MHz]": shown(self.uint("nvmlDeviceGetMaxClockInfo", h, 1), "%d MHz"),
                "clocks.max.memory [MHz]": shown(self.uint("nvmlDeviceGetMaxClockInfo", h, 2),
                                                 "%d MHz"),
                "clocks.current.sm [MHz]": shown(now["sm"], "%d MHz"),
                "clocks.current.memory [MHz]": shown(now["mem"], "%d MHz"),
                "power.draw [W]": watts(now["power_mw"]),
                "temperature.gpu": shown(now["temp"]),
                "utilization.gpu [%]": shown(now["util"], "%d %%"),
                "memory.used [MiB]": shown(self.used_mib(h), "%d MiB"),
                "clocks_event_reasons.active": shown(now["mask"], "0x%016x")})
        return {"rows": rows}

def open_nvml():
    try:
        return Nvml()
    except (OSError, AttributeError):
        return None


def binary_identity(path):
    """The binary's sha256 and that of the ggml/llama libraries beside it or in ../lib (a
    shared build reads its kernels from those)."""
    here = os.path.dirname(os.path.abspath(path))
    libs = []
    for folder in (here, os.path.join(os.path.dirname(here), "lib")):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.startswith(("libggml", "libllama")) and ".so" in name:
                full = os.path.join(folder, name)
                if not os.path.islink(full):
                    libs.append((name, full))
    digests = cached_sha256([path] + [full for _, full in libs])
    return {"path": path, "sha256": digests[path],
            "libs": dict((name, digests[full]) for name, full in libs)}


def _cpu_busy_s():
    """CPU seconds spent busy on the whole host since boot (/proc/stat)."""
    text = _read("/proc/stat") or ""
    first = text.splitlines()[0].split() if text else []
    if not first or first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / float(os.sysconf("SC_CLK_TCK"))


class _Sampler(object):
    """GPU clocks, power, utilisation and PCIe link, and other processes on the GPUs, while
    llama-bench runs: through the helper's NVML session every NVML_EVERY_S, else through
    nvidia-smi every SAMPLE_EVERY_S."""

    def __init__(self, own_pid, nvml):
        self.own_pid = str(own_pid)
        self.nvml = nvml
        self.stop = threading.Event()
        self.samples = []
        self.others = {}
        self.reasons = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.loop)
        self.thread.daemon = True

    def loop(self):
        every = NVML_EVERY_S if self.nvml is not None else SAMPLE_EVERY_S
        while not self.stop.wait(every):
            try:
                taken = self.take()
            except Exception:  # noqa: BLE001 - a driver that breaks mid-run: the samples so far
                taken = None
            if taken is None:
                return
            rows, reasons, apps = taken
            with self.lock:
                if len(self.samples) < MAX_SAMPLES:
                    self.samples.append(rows)
                self.reasons.update(reasons)
                for pid, name in apps.items():
                    if pid != self.own_pid:
                        self.others[pid] = name

    def take(self):
        if self.nvml is not None:
            rows, reasons, apps = self.nvml.sample()
        else:
            code, out, _ = _smi(["--query-gpu=" + SAMPLE_FIELDS, "--format=csv,noheader,nounits"], 10)
            if code != 0:
                return None
            rows = [line.split(", ") for line in out.splitlines() if line.strip()]
            code, out, _ = _smi(["--query-gpu=clocks_event_reasons.active", "--format=csv,noheader"], 10)
            reasons = [v.strip() for v in out.splitlines() if v.strip()] if code == 0 else []
            apps = None
        if apps is None:
            apps = dict((a.get("pid"), a.get("process_name")) for a in compute_apps() or [])
        return rows, reasons, apps

    def result(self):
        with self.lock:
            return {"samples": list(self.samples), "event_reasons": sorted(self.reasons),
                    "other_gpu_processes": sorted("%s %s" % kv for kv in self.others.items()),
                    "sampled_with": "NVML" if self.nvml is not None else "nvidia-smi"}


def _lock_holder(fd):
    """The pid (and command) holding the flock on ``fd``'s file, from /proc/locks."""
    st = os.fstat(fd)
    want = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in (_read("/proc/locks") or "").splitlines():
        fields = line.split()
        if "FLOCK" in fields and len(fields) > 5 and fields[5] == want:
            pid = fields[4]
            args = (_read("/proc/%s/cmdline" % pid) or "").split("\0")
            if "--llama-bench" in args[:-1]:  # this helper: python3 -c <its source> ...
                what = "omni-host bench of %s" % args[args.index("--llama-bench") + 1]
            else:
                what = " ".join(args).strip()[:80]
            return "pid %s of %s%s" % (pid, _user_of(pid), " (%s)" % what if what else "")
    return "another process"


def _user_of(pid):
    """The account a process runs as (its effective uid's name), from /proc/PID/status."""
    for line in (_read("/proc/%s/status" % pid) or "").splitlines():
        if line.startswith("Uid:") and len(line.split()) > 2:
            uid = line.split()[2]
            try:
                import pwd

                return "user %s" % pwd.getpwuid(int(uid)).pw_name
            except (KeyError, ValueError):
                return "uid %s" % uid
    return "an unknown user"


def lock_dir():
    """(the folder the bench lock lives in, None), or (None, why it cannot be used): root's in
    /run/omni-host, another user's in their runtime folder ($XDG_RUNTIME_DIR, else
    /tmp/omni-host-UID). Only its owner may write there: a lock in /tmp that any local user
    could create and hold refused every bench, unnamed. Benches of two users at once still
    meet in the bench's idle gate (the other's CPU and GPU load)."""
    uid = os.geteuid()
    path = "/run/omni-host" if uid == 0 else os.environ.get("XDG_RUNTIME_DIR") or \
        "/tmp/omni-host-%d" % uid
    try:
        os.mkdir(path, 0o755 if uid == 0 else 0o700)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            return None, "cannot make the bench lock's folder %s: %s" % (path, exc.strerror)
    try:
        st = os.lstat(path)
    except OSError as exc:
        return None, "cannot read the bench lock's folder %s: %s" % (path, exc.strerror)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        return None, ("the bench lock's folder %s is not this user's own (uid %d, mode %o): "
                      "no bench runs beside a lock another account controls" % (
                          path, st.st_uid, st.st_mode & 0o7777))
    return path, None


def take_lock(path=None, wait_s=0.0):
    """(fd, None) holding the host's bench lock, or (None, why not); ``wait_s``: how long to
    wait for another bench to release it (--wait), polled each half second."""
    if path is None:
        folder, why = lock_dir()
        if folder is None:
            return None, why
        path = os.path.join(folder, LOCK_NAME)
    fd = None
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            break
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                return None, "cannot open the bench lock %s: %s" % (path, exc.strerror)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            break
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                return None, "cannot create the bench lock %s: %s" % (path, exc.strerror)
    if fd is None:
        return None, "cannot open the bench lock %s" % path
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, None
        except OSError:
            if time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                continue
            holder = _lock_holder(fd)
            os.close(fd)
            waited = " (waited %gs; --wait waits longer)" % wait_s if wait_s else \
                " (--wait TIME waits for it)"
            return None, "another bench is running on this host: %s holds %s%s" % (
                holder, path, waited)


def _reader(pipe, sink, cap):
    """What the pipe holds as it comes (read1: read(n) waited for n bytes, and a child that
    kept the pipe open lost the run's whole output: "not JSON: ''")."""
    size = 0
    for chunk in iter(lambda: pipe.read1(65536), b""):
        if size < cap:
            sink.append(chunk)
            size += len(chunk)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphans of llama-bench (a child it started in a session of its own) become this
    process's children instead of init's, so that kill_orphans finds them (Linux >= 3.4)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def kill_orphans(rounds=5):
    """Kill and reap every remaining child of this process, and the children they leave in
    turn (reparented here): the benchmark never outlives its run. Returns the pids killed."""
    killed = []
    for _ in range(rounds):
        found = _kill_children()
        if not found:
            break
        killed += found
    return killed


def _kill_children():
    me, killed = str(os.getpid()), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = _read("/proc/%s/stat" % pid) or ""
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == me:
            try:
                os.kill(int(pid), 9)
                killed.append(int(pid))
            except OSError:
                pass
    for pid in killed:
        with contextlib.suppress(OSError):  # reaped already (a sampler's nvidia-smi)
            os.waitpid(pid, 0)
    return killed


def cpu_ranges(cpus):
    """A set of CPUs as the kernel lists them (``0-3,8``)."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else "%d" % run[0])
        run = [cpu]
    if run:
        out.append("%d-%d" % (run[0], run[-1]) if len(run) > 1 else "%d" % run[0])
    return ",".join(out)


def cpu_set(text):
    """The CPUs of a kernel's list (``0-3,8``); None where it is not one."""
    found = set()
    for part in (text or "").split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        top = int(high or low)
        if top - int(low) > 4096:
            return None
        found.update(range(int(low), top + 1))
    return found or None


def _limited(limits, rlimits, cpus=None):
    """The function that sets an arm's resource limits (as a container's runtime sets them on
    its processes) and the CPUs it may run on (``cpus``, a kernel's list) in its llama-bench
    before it starts; None for none. ``rlimits``: knob name -> (setrlimit's name, its
    /proc/PID/limits row), as the A/B was handed them."""
    if not limits and not cpus:
        return None
    import resource

    def apply():  # in the child, before exec: a refusal is its stderr and exit 126
        if cpus:
            try:
                os.sched_setaffinity(0, cpu_set(cpus) or set())
            except (ValueError, OSError) as exc:
                os.write(2, ("cannot run on CPUs %s: %s (outside this session's cpuset?)\n"
                             % (cpus, exc)).encode())
                os._exit(126)
        for name, value in (limits or {}).items():
            which = getattr(resource, rlimits[name][0])
            limit = resource.RLIM_INFINITY if value < 0 else value
            try:
                resource.setrlimit(which, (limit, limit))
            except (ValueError, OSError) as exc:
                os.write(2, ("cannot set %s to %s: %s (above this session's hard limit, and "
                             "no CAP_SYS_RESOURCE)\n" % (rlimits[name][0], "unlimited" if value < 0
                                                         else value, exc)).encode())
                os._exit(126)
    return apply


def limits_now(names, rlimits):
    """This process's limits by knob name ("unlimited" or bytes): an arm's "now"."""
    import resource

    found = {}
    for name in names:
        soft = resource.getrlimit(getattr(resource, rlimits[name][0]))[0]
        found[name] = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    return found


def _proc_limits(pid, names, rlimits):
    """What the kernel holds for the running process (/proc/PID/limits), soft limit by knob."""
    text = _read("/proc/%d/limits" % pid) or ""
    found = {}
    for name in names:
        title = rlimits[name][1]
        line = next((row for row in text.splitlines() if row.startswith(title)), "")
        found[name] = line[len(title):].split()[0] if line.strip() else None
    return found


def run_bench(argv, budget_s, gpus, env, limits=None, rlimits=None, cpus=None):
    """One llama-bench run, watched. ``gpus``: falsy on a host without them, else the
    helper's NVML session or True (sampled with nvidia-smi); ``limits``: resource limits
    set on it by knob name (bytes, -1 unlimited)."""
    start = time.monotonic()
    busy0 = _cpu_busy_s()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env,
                                preexec_fn=_limited(limits, rlimits, cpus))
    except OSError as exc:  # (a limit the host refuses is the child's exit 126: _limited)
        return {"argv": argv, "exit_code": None, "error": "%s: %s" % (argv[0], exc.strerror or exc)}, None
    held = _proc_limits(proc.pid, limits, rlimits) if limits else None
    children0 = os.times()
    sampler = _Sampler(proc.pid, gpus if isinstance(gpus, Nvml) else None) if gpus else None
    if sampler:
        sampler.thread.start()
    out, err = [], []
    readers = [threading.Thread(target=_reader, args=(proc.stdout, out, OUTPUT_CAP)),
               threading.Thread(target=_reader, args=(proc.stderr, err, OUTPUT_CAP))]
    for reader in readers:
        reader.daemon = True
        reader.start()
    timer = threading.Timer(min(budget_s, threading.TIMEOUT_MAX), proc.kill)  # the budget spent
    timer.daemon = True
    timer.start()
    try:  # its end heard at once: a wait with a timeout polls, up to 50 ms late (issue 44)
        proc.wait()
    finally:
        timer.cancel()
    wall = time.monotonic() - start
    timed_out = wall >= budget_s and proc.returncode == -9
    if sampler:  # its nvidia-smi in flight (up to 0.3 s) is not waited for: the samples so far
        sampler.stop.set()  # (its NVML calls take milliseconds: waited for, the session closes)
        sampler.thread.join(0.05 if sampler.nvml is None else 2.0)
    left = kill_orphans()  # a child llama-bench left behind (setsid) holds its pipes open
    for reader in readers:
        reader.join(5)
    children = os.times()
    own = (children[2] - children0[2]) + (children[3] - children0[3])
    busy1 = _cpu_busy_s()
    stderr = b"".join(err).decode("utf-8", "replace").splitlines()
    run = {"argv": argv, "exit_code": proc.returncode, "timed_out": timed_out,
           "duration_s": round(wall, 3), "stdout": b"".join(out).decode("utf-8", "replace"),
           "stderr_tail": stderr[-STDERR_LINES:], "orphans_killed": left}
    if held is not None and proc.returncode != 126:  # 126: the limit was refused (_limited)
        run["limits"] = held
    during = sampler.result() if sampler else {}
    if busy0 is not None and busy1 is not None and wall > 0:
        during["own_cpu_s"] = round(own, 3)
        during["other_cpu_load"] = round(max(0.0, busy1 - busy0 - own) / wall, 3)
    return run, during


def _current(path):
    """A knob's value now: a sysfs switch's bracketed choice (``always [madvise] never``), else
    the file's text."""
    text = (_read(path) or "").strip()
    if "[" in text and "]" in text:
        return text[text.index("[") + 1:text.index("]")]
    return text


def _write(path, value):
    """Set a knob; None, or why it could not be set."""
    try:
        with open(path, "w") as fh:
            fh.write(value)
        return None
    except (IOError, OSError) as exc:
        return "%s: %s" % (path, exc.strerror or exc)


def _expand(path):
    import glob

    return sorted(glob.glob(path))[:4096] if any(c in path for c in "*?[") else [path]


def knob_settings(files):
    """Each knob's setting now (``files``: name -> its file, a glob for one a CPU): the value,
    or ``mixed`` where the files of a glob differ; a knob whose file is not there is left
    out (no THP in the kernel, no cpufreq in a VM)."""
    out = {}
    for name, path in sorted(files.items()):
        values = sorted(set(_current(one) for one in _expand(path) if os.path.exists(one)))
        if values:
            out[name] = values[0] if len(values) == 1 else "mixed"
    return out


def spawn_restorer(originals):
    """A process of its own session that writes ``originals`` back once this process is gone
    (its end of a pipe closes with it, however it ends: SIGKILL and a lost connection
    included) or has said the run ended. Spawned before this process becomes a subreaper, so
    that it is init's orphan, not a child kill_orphans would take. Returns the pipe's fd."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            os.setsid()  # out of the process group the collector kills
            if os.fork() > 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # never hold the collector's pipes open
                os.dup2(null, fd)
            for fd in range(3, 1024):
                if fd != r:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            while os.read(r, 1):  # EOF: the helper is gone, or done
                pass
            for path, value in originals.items():
                _write(path, value)
        finally:
            os._exit(0)
    os.close(r)
    os.waitpid(pid, 0)
    return w


def knob_originals(ab):
    """Each file an A/B's arms write, with its value now (what is restored)."""
    originals = {}
    for arm in ab["arms"]:
        for path, _ in arm.get("writes") or []:
            for one in _expand(path):
                originals.setdefault(one, _current(one))
    return originals


def run_ab(binary, model, opts, ab, gpus, env, originals, pipe):
    """Interleaved A/B runs of llama-bench: each pair runs every arm (its knobs written, its
    own args), alternating which goes first; every knob back to its value before, whatever
    happens (the restorer spawned beforehand, and here). An arm whose llama-bench failed
    (exit status, timeout) is not run again: a split mode the build cannot load, a placement
    that does not fit, fails every round (25 of a two-H100 sweep's 55 runs, 21 of its 82 s)."""
    arms = ab["arms"]
    rlimits = ab.get("rlimits") or {}
    limited = sorted(set(n for a in arms for n in a.get("limits") or {}))
    out = {"arms": [a["name"] for a in arms], "runs": [],
           "before": dict(originals, **limits_now(limited, rlimits)), "restored": {}}
    missing = [p for p in originals if not os.path.exists(p)]
    wanted = [path for arm in arms for path, _ in arm.get("writes") or []]
    if missing or (wanted and not originals):
        out["error"] = "a knob's file is not there: %s" % ", ".join(missing or wanted)
        return out
    broken = set()  # arms whose llama-bench failed (or whose server did not load): not run
    took = {}  # arm -> its last run's seconds (what the next round of it should take)
    started = time.monotonic()  # the budget counts the loads too
    try:
        if ab.get("loads"):
            out["loads"] = _loads(binary, model, arms, ab["loads"], gpus, env, broken)
        for i in range(int(ab["pairs"])):
            if i and ab.get("budget_s") and not _within_budget(
                    ab, out, took, broken, i, float(ab["budget_s"]) -
                    (time.monotonic() - started), _fastest(out["runs"], i - 1)):
                break
            for arm in arms if i % 2 == 0 else arms[::-1]:
                if arm["name"] in broken:
                    continue
                wrote = [(one, value) for path, value in arm.get("writes") or []
                         for one in _expand(path)]
                failed = [w for w in (_write(p, originals[p]) for p in originals) if w]
                failed += [w for w in (_write(p, v) for p, v in wrote) if w]
                if failed:
                    out["error"] = "cannot set the knob: %s" % "; ".join(failed)[:300]
                    return out
                command = [binary, "-m", model, "-o", "json", "-r", opts["repetitions"]] + \
                    list(arm["args"])
                arm_env = dict(env)  # the arm's variables (None: unset for its run)
                for name, value in (arm.get("env") or {}).items():
                    if value is None:
                        arm_env.pop(name, None)
                    else:
                        arm_env[name] = value
                run, during = run_bench(command, float(opts["budget_s"]), gpus, arm_env,
                                        arm.get("limits"), rlimits, arm.get("cpus"))
                out["runs"].append({"arm": arm["name"], "pair": i, "run": run,
                                    "during": during})
                took[arm["name"]] = run.get("duration_s") or 0.0
                if run.get("exit_code") != 0 or run.get("timed_out"):
                    broken.add(arm["name"])
    finally:
        for path, value in originals.items():
            out["restored"][path] = _write(path, value) or "ok"
        if pipe is not None:
            os.close(pipe)
    return out


def _within_budget(ab, out, took, broken, done, left_s, fastest=None):
    """Before round ``done``: whether it fits in the ``left_s`` seconds the proof's budget
    leaves, each arm's round as long as its last. Where it does not, the arms ``keep`` does
    not name, nor the ``fastest`` of the round before (the one the rounds should confirm or
    not), leave the rounds, the costliest first, until it does (``out["shed"]``: arm -> the
    rounds it ran); where the kept arms alone do not fit, the rounds stop here
    (``out["stopped"]``), as they do where one arm would be left (a round of one compares
    nothing)."""
    keep = set(ab.get("keep") or ()) | ({fastest} if fastest else set())
    running = [a["name"] for a in ab["arms"] if a["name"] not in broken]
    while sum(took.get(a, 0.0) for a in running) > left_s:
        costly = sorted((a for a in running if a not in keep), key=lambda a: -took.get(a, 0.0))
        if not costly or len(running) < 3:
            out["stopped"] = {"rounds": done, "budget_s": ab["budget_s"]}
            return False
        out.setdefault("shed", {})[costly[0]] = done
        broken.add(costly[0])
        running.remove(costly[0])
    return bool(running)


def _fastest(runs, pair):
    """The arm whose generation test ran fastest in round ``pair`` (llama-bench's -o json
    records: the highest avg_ts of a test that generates), None where no run of it says."""
    best, name = 0.0, None
    for entry in runs:
        if entry.get("pair") != pair:
            continue
        try:
            records = json.loads((entry.get("run") or {}).get("stdout") or "[]")
        except ValueError:
            continue
        for record in records if isinstance(records, list) else ():
            rate = record.get("avg_ts") if isinstance(record, dict) else None
            if isinstance(rate, (int, float)) and record.get("n_gen") and rate > best:
                best, name = float(rate), entry.get("arm")
    return name


def _loads(binary, model, arms, loads, gpus, env, broken):
    """Each arm's placement loaded once as a real llama-server (``loads``: arm -> its flags and
    the served context), before any round: arm -> what the load found; an arm whose server
    did not load joins ``broken`` (it is not benched: the proof drops it and says why)."""
    server = server_beside(binary)
    memory = getattr(gpus, "memory", None) or list
    found = {}
    for arm in arms:
        args = loads.get(arm["name"])
        if args is None:
            continue
        if server is None:
            found[arm["name"]] = {"error": "no llama-server beside %s" % binary}
            continue
        found[arm["name"]] = done = load_server(server, model, args, env, memory)
        if not done["loaded"]:
            broken.add(arm["name"])
    return found


def physical_cores(cpus):
    """How many physical cores the CPUs in ``cpus`` are (SMT siblings counted once), from
    sysfs; None where the topology is not readable."""
    cores = set()
    for cpu in cpus:
        base = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
        core, package = _read(base + "core_id"), _read(base + "physical_package_id")
        if core is None or package is None:
            return None
        cores.add((package.strip(), core.strip()))
    return len(cores) or None


def _fit_params(binary, model, args, env, timeout_s=120, breakdown=False):
    """llama-fit-params (beside llama-bench: the same build) on ``args``: {"code", "stdout",
    "stderr_tail"}, or {"error": why}. ``breakdown``: run it with --log-jsonl and keep its
    memory breakdown's rows (``fit_memory_breakdown``: per device total and free as the CUDA
    backend sees them in a process of its own, after its context, and what the args take) as
    "breakdown", its other JSON lines left out of stdout; a build that refuses --log-jsonl
    (its error names the flag) is asked again without it, any other failure is the answer."""
    try:
        proc = subprocess.run([binary, "-m", model] + list(args)
                              + (["--log-jsonl"] if breakdown else []), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"error": "no answer in %d s" % timeout_s}
    except OSError as exc:
        return {"error": str(exc)}
    if breakdown and proc.returncode and b"--log-jsonl" in proc.stderr:  # a build without it
        return _fit_params(binary, model, args, env, timeout_s)
    stdout, rows = proc.stdout.decode("utf-8", "replace"), None
    if breakdown:
        kept = []
        for line in stdout.splitlines():
            if not line.startswith("{"):
                kept.append(line)
                continue
            try:
                doc = json.loads(line) if len(line) < 65536 else None
            except ValueError:
                doc = None
            if isinstance(doc, dict) and doc.get("type") == "fit_memory_breakdown" and \
                    isinstance(doc.get("data"), dict):
                rows = doc["data"].get("rows")
        stdout = "\n".join(kept)
    tail = proc.stderr.decode("utf-8", "replace").splitlines()[-STDERR_LINES:]
    out = {"code": proc.returncode, "stdout": stdout[-65536:],
           "stderr_tail": [line[:400] for line in tail]}
    if isinstance(rows, list):
        out["breakdown"] = [r for r in rows if isinstance(r, dict)][:64]
    return out


def plan_facts(llama_bench, model, plan, env):
    """What ``omni-host plan`` needs beside the bench's context: the CPUs' physical cores,
    the host's memory, and llama.cpp's own answers where the build has llama-fit-params:
    its --fit placement (``fit``) and its memory estimate per device for each args list of
    ``estimate`` (-fitp on)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cpus = list(range(os.cpu_count() or 1))
    meminfo = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable", "SwapFree"):
            meminfo[name] = int(rest.split()[0]) if rest.split() else None
    out = {"cpus": len(cpus), "physical_cores": physical_cores(cpus), "meminfo_kib": meminfo}
    fit_binary = os.path.join(os.path.dirname(llama_bench), "llama-fit-params")
    if not os.access(fit_binary, os.X_OK):
        out["fit_params"] = None
        return out
    out["fit_params"] = fit_binary
    out["fit"] = _fit_params(fit_binary, model, plan.get("fit") or [], env, breakdown=True)
    out["estimates"] = [dict(_fit_params(fit_binary, model, list(args) + ["-fitp", "on"], env),
                             args=list(args)) for args in plan.get("estimate") or []]
    return out


def _together(**calls):
    """Each call in a thread of its own (nvidia-smi, NVML and hashing wait on different
    things): name -> its result, None where it raised."""
    found = {}

    def one(name, call):
        try:
            found[name] = call()
        except Exception:  # noqa: BLE001 - one probe's failure is that probe's None
            found[name] = None

    threads = [threading.Thread(target=one, args=item) for item in calls.items()]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    return found


def gate_reads(session):
    """{"gpu": the GPUs' state, "apps": their compute processes} through the helper's NVML
    session: no nvidia-smi process starts (each initialises NVML again, 0.02-0.07 CPU-s on an
    H100, beside the audit's GPU reader); nvidia-smi reads what NVML cannot (no library, no
    GPU counted, a GPU lost, processes it cannot list), and says what is wrong in its words."""
    state = apps = None
    if session is not None:
        try:
            state, apps = session.state(), session.apps()
        except Exception:  # noqa: BLE001 - a driver that answers oddly: nvidia-smi reads it
            state = apps = None
    if state is None:
        return _together(gpu=gpu_state, apps=compute_apps)
    return {"gpu": state, "apps": apps if apps is not None else compute_apps()}


def main(argv):
    opts = _args(argv)
    binary, model = opts["llama_bench"], opts["model"]
    doc = {"helper": 1, "refused": None}
    env = dict(os.environ)
    env.update(json.loads(opts.get("env_json") or "{}"))  # omni_bench.env: as served
    # a plan that proves nothing runs no llama-bench: it needs no lock (it failed beside any
    # bench of the host, exit 2)
    predicts = opts.get("plan_json") and not opts.get("ab_json")
    lock, why = (True, None) if predicts else take_lock(wait_s=float(opts.get("wait_lock") or 0))
    if lock is None:
        doc.update({"refused": why, "gate": {}, "context": {}})
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    started = time.monotonic()
    ab = json.loads(opts["ab_json"]) if opts.get("ab_json") else None
    originals, pipe = {}, None
    if ab is not None:  # a signal ends the A/B through its finally: the knobs restored
        import signal

        def _stop(signum, frame):
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGHUP, _stop)
        originals = knob_originals(ab)
        pipe = spawn_restorer(originals) if originals else None  # before the subreaper
    become_subreaper()
    found = _together(nvml=open_nvml, binary=lambda: binary_identity(binary),
                      model=lambda: model_identity(model),
                      tensors=lambda: gguf_tensor_map(gguf_model_files(model)))
    session = found["nvml"]
    found.update(gate_reads(session))
    try:
        _decide(doc, opts, found, binary, model, env, ab, originals, pipe, started)
    finally:
        if session is not None:
            session.close()
    sys.stdout.write(json.dumps(doc) + "\n")


def _decide(doc, opts, found, binary, model, env, ab, originals, pipe, started):
    """The gate, the context, then the run, the A/B or the plan's facts, into ``doc``."""
    gpus, apps, session = found["gpu"], found["apps"], found["nvml"]
    watch = (session or True) if gpus is not None else None
    doc["gate"] = {"compute_apps": apps, "max_busy_pct": float(opts["max_busy_pct"]),
                   "forced": opts["force"]}
    busy = []
    if isinstance(gpus, dict) and gpus.get("error"):  # never an open gate by default
        busy.append("cannot tell whether the GPU is idle (nvidia-smi: %s)" % gpus["error"][:200])
    elif gpus is not None and apps is None:
        busy.append("cannot tell whether the GPU is idle (nvidia-smi --query-compute-apps failed)")
    for app in apps or []:
        busy.append("process %s (%s) on a GPU" % (app.get("pid"), app.get("process_name")))
    for row in (gpus or {}).get("rows", []):
        util = row.get("utilization.gpu [%]", "").replace("%", "").strip()
        if util.isdigit() and int(util) > float(opts["max_busy_pct"]):
            busy.append("GPU %s %s%% busy" % (row.get("index"), util))
    model_id = found["model"]
    if model_id.get("error"):
        doc["refused"] = "model %s: %s" % (model, model_id["error"])
    if not os.access(binary, os.X_OK):
        doc["refused"] = "llama-bench %s: %s" % (
            binary, "not executable" if os.path.exists(binary) else "no such file")
    elif busy and not opts["force"]:
        doc["refused"] = "busy: " + "; ".join(busy)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    doc["context"] = {
        "cpus_allowed": affinity, "cpu_quota": cpu_quota(),
        "cpu_list": cpu_ranges(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else None,
        "loadavg": (_read("/proc/loadavg") or "").split()[:3],
        "model": model_id, "env": bench_env(env), "tensor_map": found["tensors"],
        "knobs": knob_settings(json.loads(opts.get("knob_files_json") or "{}")),
        "gpus": gpus, "nvml": session.memory() if session and gpus is not None else [],
        "busy_before": busy,
    }
    doc["timing"] = {"before_s": round(time.monotonic() - started, 3)}
    if opts.get("wait_go"):  # started beside the audit's probes: run once they have finished
        said = sys.stdin.readline().strip()
        doc["timing"]["waited_s"] = round(time.monotonic() - started, 3)
        if said != "go" and doc["refused"] is None:
            doc["refused"] = "the collector stopped before the run (no word to go on)"
    plan = json.loads(opts["plan_json"]) if opts.get("plan_json") else None
    if plan is not None:  # a plan reads and measures nothing: a busy GPU is said, not refused
        if doc["refused"] and doc["refused"].startswith("busy: "):
            doc["refused"] = None
        if doc["refused"] is None:
            doc["context"]["binary"] = found["binary"]
            doc["plan"] = plan_facts(binary, model, plan, env)
            doc["timing"]["total_s"] = round(time.monotonic() - started, 3)
    elif doc["refused"] is None and ab is not None:
        doc["context"]["binary"] = found["binary"]
        doc["ab"] = run_ab(binary, model, opts, ab, watch, env, originals, pipe)
        doc["timing"]["total_s"] = round(time.monotonic() - started, 3)
    elif doc["refused"] is None:
        doc["context"]["binary"] = found["binary"]
        command = [binary, "-m", model, "-o", "json", "-r", opts["repetitions"]] + opts["extra"]
        doc["run"], doc["during"] = run_bench(command, float(opts["budget_s"]), watch, env)
        doc["timing"]["total_s"] = round(time.monotonic() - started, 3)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.stdout.flush()  # then end at once: the collector waits for this process's end, and
    sys.stderr.flush()  # the interpreter's teardown would only delay it and the report
    os._exit(0)
