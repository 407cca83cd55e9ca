"""One NVML session (libnvidia-ml, the library nvidia-smi itself reads) through ctypes: the
collector's GPU reader (nvml.py) and the bench helper's sampler (bench.py) both open it. Shared
by text: the host runs this file's source, then the helper's. Standard library only, Python 3.6.
"""

import ctypes


class PciInfo(ctypes.Structure):  # nvmlPciInfo_t
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class Session(object):
    """An open NVML; each read is None where this driver or board does not answer it."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        code = self.lib.nvmlInit_v2()
        if code != 0:
            raise OSError("nvmlInit_v2: NVML error %d" % code)
        self.handles = []
        self.lost = []  # (index, NVML error) of each GPU counted that gave no handle
        count = ctypes.c_uint()
        self.count = count.value if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 \
            else None
        for i in range(self.count or 0):
            handle = ctypes.c_void_p()
            code = self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
            if code == 0:
                self.handles.append(handle)
            else:  # a GPU fallen off the bus answers so (NVML_ERROR_GPU_IS_LOST, 15)
                self.lost.append((i, code))

    def ok(self, name, *args):
        fn = getattr(self.lib, name, None)  # an older driver lacks newer calls
        return fn is not None and fn(*args) == 0

    def value(self, kind, name, *args):
        out = kind()
        return out.value if self.ok(name, *(args + (ctypes.byref(out),))) else None

    def uint(self, name, *args):
        return self.value(ctypes.c_uint, name, *args)

    def text(self, name, *args):
        buf = ctypes.create_string_buffer(96)
        got = self.ok(name, *(args + (buf, ctypes.c_uint(96))))
        return buf.value.decode("utf-8", "replace") if got else None

    def ulongs(self, name, handle, count):
        out = (ctypes.c_ulonglong * count)()
        return list(out) if self.ok(name, handle, ctypes.byref(out)) else None

    def pci(self, name, *args):
        info = PciInfo()
        return info if self.ok(name, *(args + (ctypes.byref(info),))) else None

    def pci_info(self, h):
        """The GPU's PCI identity (the _v2 call of drivers before _v3 fills the same structure)."""
        return self.pci("nvmlDeviceGetPciInfo_v3", h) or self.pci("nvmlDeviceGetPciInfo_v2", h)

    def close(self):
        self.lib.nvmlShutdown()
