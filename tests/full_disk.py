"""A small filesystem of its own for a test that fills it: a tmpfs of `size` bytes mounted on a new
folder (needs root: the test is skipped, saying why, where it cannot be mounted), unmounted after.

    with full_disk.small_filesystem(self, "64k") as d:
        ...  # d fills after about 64 KiB; writes then fail with ENOSPC ("No space left on device")
"""
import contextlib
import os
import subprocess
import tempfile


@contextlib.contextmanager
def small_filesystem(test, size):
    folder = tempfile.mkdtemp(prefix="ptrain-full-disk-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(folder)
        test.skipTest(f"cannot mount a {size} tmpfs: {mounted.stderr.strip() or 'mount failed'} (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)
        os.rmdir(folder)


def fill(folder):
    """Takes what is left of `folder`'s filesystem: a file as large as it will go."""
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError:  # ENOSPC
            pass
