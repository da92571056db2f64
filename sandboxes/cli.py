"""``agentgym sandbox build|clean|status``: manage the sandbox image and containers.

Wired into the ``agentgym`` command by ``agentgym.cli``; also runnable on its own as
``python -m agentgym.sandboxes.cli build``.
"""

from __future__ import annotations

import argparse
import sys

from agentgym.errors import SandboxUnavailable

__all__ = ["main"]


def _build(args: argparse.Namespace) -> int:
    from agentgym.sandboxes import image

    if args.rootfs_only:
        path = image.build_rootfs(force=args.force)
        print(f"rootfs ready at {path}")
        return 0
    image.build_image(force=args.force, dockerfile=args.dockerfile)
    if not args.dockerfile:
        print(f"rootfs (for the bwrap backend) at {image.rootfs_path()}")
    return 0


def _clean(args: argparse.Namespace) -> int:
    from agentgym.sandboxes.docker_backend import docker_client
    from agentgym.sandboxes.image import IMAGE_REPO, image_tag
    from agentgym.sandboxes.orphans import remove_orphans

    client = docker_client()
    removed = remove_orphans(client, everything=args.all)
    what = "sandbox containers" if args.all else "orphaned sandbox containers (owner process gone)"
    print(f"removed {len(removed)} {what}{': ' + ' '.join(removed) if removed else ''}")
    if args.images:
        current = image_tag()
        for img in client.images.list(name=IMAGE_REPO):
            stale = [t for t in img.tags if t != current]
            if stale and current not in img.tags:
                for tag in stale:
                    client.images.remove(tag)
                    print(f"removed stale image {tag}")
        import shutil

        from agentgym.sandboxes.image import cache_dir, recipe_hash

        for d in cache_dir().glob("*"):
            if d.is_dir() and d.name != recipe_hash():
                shutil.rmtree(d, ignore_errors=True)
                print(f"removed stale rootfs {d}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from agentgym.sandboxes import image
    from agentgym.sandboxes.bwrap_backend import bwrap_available

    tag = image.image_tag()
    print(f"image tag (recipe hash): {tag}")
    try:
        from agentgym.sandboxes.docker_backend import docker_client
        from agentgym.sandboxes.orphans import OWNER_LABEL, is_orphan, list_sandbox_containers

        client = docker_client()
        try:
            client.images.get(tag)
            print("docker:  engine reachable, image present")
        except Exception:
            print("docker:  engine reachable, image MISSING (run `agentgym sandbox build`)")
        containers = list_sandbox_containers(client)
        orphans = [c for c in containers if is_orphan((c.get("Labels") or {}).get(OWNER_LABEL, ""))]
        print(f"         {len(containers)} sandbox containers, {len(orphans)} orphaned")
    except SandboxUnavailable as exc:
        print(f"docker:  unavailable: {exc}")
    problem = bwrap_available()
    rootfs = image.rootfs_path()
    if problem:
        print(f"bwrap:   unavailable: {problem}")
    elif rootfs.is_dir():
        print(f"bwrap:   available, rootfs at {rootfs}")
    else:
        print(f"bwrap:   available, rootfs MISSING at {rootfs} (run `agentgym sandbox build`)")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="agentgym sandbox", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the sandbox image (cached by recipe hash)")
    b.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    b.add_argument("--dockerfile", action="store_true",
                   help="build from the Dockerfile (needs a registry for debian:bookworm-slim)")
    b.add_argument("--rootfs-only", action="store_true",
                   help="only the rootfs for the bwrap backend (no Docker needed)")
    b.set_defaults(fn=_build)
    c = sub.add_parser("clean", help="remove sandbox containers whose owner process is gone")
    c.add_argument("--all", action="store_true", help="remove every sandbox container")
    c.add_argument("--images", action="store_true",
                   help="also remove stale sandbox images and rootfs dirs (older recipes)")
    c.set_defaults(fn=_clean)
    s = sub.add_parser("status", help="which backends are usable here")
    s.set_defaults(fn=_status)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
