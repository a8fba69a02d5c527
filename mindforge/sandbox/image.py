"""Building the sandbox image without a registry.

The image is tagged by a hash of the ``mindforge/data/sandboxes/python`` tree
(paths relative to it and bytes, so where the package is installed does not
change the tag): a change to the Dockerfile or the runner builds a new image
and an unchanged tree reuses the old one. Its base is ``python:3.12-slim`` when that is present or can be
pulled; where no registry answers, a Debian base is made with debootstrap from
the host's own apt sources (the mirror and suite are read from the apt
configuration, never hard-coded) and imported with ``docker import``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from mindforge.errors import MindForgeError
from mindforge.paths import sandbox_context_dir
from mindforge.sandbox.config import SandboxConfig

IMAGE_REPO = "mindforge-sandbox"
BASE_REPO = "mindforge/debian-base"
BASE_PACKAGES = ("python3",)


class ImageError(MindForgeError):
    pass


def sandbox_dir() -> Path:
    here = sandbox_context_dir()
    if not (here / "Dockerfile").exists():
        raise ImageError(f"sandbox build context not found at {here}: the package was installed without its "
                         "data; reinstall MindForge from its wheel or a source checkout")
    return here


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def image_tag(config: SandboxConfig) -> str:
    return config.image or f"{IMAGE_REPO}:{tree_hash(sandbox_dir())}"


def _env(host: str | None) -> dict[str, str] | None:
    """The environment that points the docker CLI at ``host`` (None: the CLI's own default)."""
    return {**os.environ, "DOCKER_HOST": host} if host else None


def _docker(*args: str, host: str | None = None, timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, env=_env(host), **kw)


def image_exists(tag: str, host: str | None = None) -> bool:
    return _docker("image", "inspect", tag, host=host).returncode == 0


def apt_source() -> tuple[str, str]:
    """(mirror URL, suite) of the host's first Debian source, from deb822 or one-line files."""
    files = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for f in files:
        for stanza in re.split(r"\n\s*\n", f.read_text()):
            fields = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE)
            )
            if "deb" in fields.get("types", "").split() and fields.get("uris") and fields.get("suites"):
                uri, suite = fields["uris"].split()[0], fields["suites"].split()[0]
                if "security" not in suite:
                    return uri, suite
    for f in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if f.exists():
            for line in f.read_text().splitlines():
                m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and "security" not in m.group(2):
                    return m.group(1), m.group(2)
    raise ImageError("no Debian source found in /etc/apt/sources.list{,.d}; cannot debootstrap a base")


def debian_base(log=print, host: str | None = None) -> str:
    """A debootstrapped Debian base with python3, imported into Docker once."""
    mirror, suite = apt_source()
    tag = f"{BASE_REPO}:{suite}-{hashlib.sha256(f'{mirror}|{suite}|{BASE_PACKAGES}'.encode()).hexdigest()[:8]}"
    if image_exists(tag, host):
        return tag
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed (Debian: apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="mf-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"debootstrap {suite} from {mirror} (a few minutes, once)")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(rootfs), mirror]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise ImageError(f"debootstrap failed: {run.stderr[-2000:] or run.stdout[-2000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.Popen(["docker", "import", "-", tag], stdin=tar.stdout, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_env(host))
        # Only docker may hold the pipe's read end: if it dies early, tar must get SIGPIPE, not block forever.
        tar.stdout.close()
        _, err = imp.communicate()
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import failed: {err[-2000:]}")
    return tag


def resolve_base(config: SandboxConfig, log=print) -> str:
    if image_exists(config.base, config.docker_host):
        return config.base
    try:
        if _docker("pull", config.base, host=config.docker_host, timeout=60).returncode == 0:
            return config.base
    except subprocess.TimeoutExpired:
        pass
    log(f"{config.base} cannot be pulled here; building a Debian base from the host's apt sources")
    return debian_base(log, config.docker_host)


def ensure_image(config: SandboxConfig, log=print) -> str:
    """The sandbox image's tag; built first when missing."""
    tag = image_tag(config)
    if image_exists(tag, config.docker_host):
        return tag
    # A stopped daemon reads as a missing image; say so before minutes of debootstrap that cannot import.
    ping = _docker("version", "--format", "{{.Server.Version}}", host=config.docker_host, timeout=30)
    if ping.returncode != 0:
        raise ImageError(f"the Docker daemon is not reachable ({ping.stderr.strip()[-300:]}); "
                         "`make setup` starts it, or set DOCKER_HOST")
    if config.image:
        raise ImageError(f"configured sandbox image {tag} is missing")
    base = resolve_base(config, log)
    log(f"building {tag} FROM {base}")
    run = _docker("build", "--build-arg", f"BASE={base}", "--label", f"{config.label}.image=1", "-t", tag,
                  str(sandbox_dir()), host=config.docker_host)
    if run.returncode != 0:
        raise ImageError(f"docker build failed:\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}")
    return tag
