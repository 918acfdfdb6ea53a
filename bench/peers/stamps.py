"""What the peers stamp their results with, as ktune stamps its own: the git
revision of the tree the peer ran from, and the NVIDIA driver's release.
Needs no torch.
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def git_revision(root=ROOT):
    """`git describe --always --dirty --abbrev=7` of the tree; where it has no .git (a copy carried to a GPU
    machine), the revision scripts/gpu-prepare recorded in .gpu-prebuilt/revision; else "unknown"."""
    if os.path.isdir(os.path.join(root, ".git")):
        try:
            out = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=7"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.CalledProcessError):
            pass
    try:
        with open(os.path.join(root, ".gpu-prebuilt", "revision")) as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


def parse_nvidia_driver_release(text):
    """The release ("580.159.04") on the NVRM line of /proc/driver/nvidia/version's text, else None."""
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        for word in line.split():
            if word[0].isdigit() and "." in word and not word.endswith(".") and all(
                    c.isdigit() or c == "." for c in word):
                return word
    return None


def nvidia_driver(path="/proc/driver/nvidia/version"):
    """The NVIDIA driver's release (what nvidia-smi calls the driver version), or None where unreadable."""
    try:
        with open(path) as f:
            return parse_nvidia_driver_release(f.read())
    except OSError:
        return None
