"""Checks of the built wheels, for scripts/wheel.sh (ADR-074).

Run with the build tools' interpreter (it needs ``auditwheel``'s policy table and
``pyelftools``, which ``auditwheel`` depends on)::

    python tests/wheel/check_wheel.py repaired WHEEL
    python tests/wheel/check_wheel.py same WHEEL_A WHEEL_B

``repaired`` passes when the wheel's platform tags are all manylinux tags and every library that
one of its ELF files needs is either vendored in the wheel (``<package>.libs/``, reachable
through an ``$ORIGIN`` run path of the file that needs it) or on the manylinux policy's list of
libraries a system provides. It prints what was vendored and what the system must provide.
``same`` passes when two wheels hold the same files and the same metadata (the wheel built from
the sdist against the one built from the tree). Each exits 1 with one line per problem when it
does not pass.
"""

import io
import json
import posixpath
import re
import sys
import zipfile
from importlib import resources

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")  # PEP 600
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def platform_tags(wheel):
    """Return the platform tags in a wheel's file name.

    Parameters
    ----------
    wheel : str
        Path of a ``.whl`` file named as PEP 427 says.

    Returns
    -------
    list of str
        The tags of its last field (``manylinux_2_17_x86_64.manylinux2014_x86_64`` gives two).
    """
    name = posixpath.basename(wheel)
    if not name.endswith(".whl") or name.count("-") < 4:
        raise SystemExit(f"{name}: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    return name[: -len(".whl")].split("-")[-1].split(".")


def policy_whitelist(tag):
    """Return the libraries a system provides under a manylinux tag, or None.

    Parameters
    ----------
    tag : str
        A platform tag, e.g. ``manylinux_2_34_x86_64`` or ``manylinux2014_x86_64``.

    Returns
    -------
    set of str or None
        The policy's ``lib_whitelist`` (auditwheel's table, the PEP 600 profiles), or None when
        the tag is no manylinux tag auditwheel knows.
    """
    for legacy, (major, minor) in LEGACY.items():
        if tag.startswith(legacy + "_"):
            tag = f"manylinux_{major}_{minor}_{tag[len(legacy) + 1:]}"
    match = MANYLINUX.match(tag)
    if match is None:
        return None
    name = f"manylinux_{match[1]}_{match[2]}"
    text = resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text()
    for policy in json.loads(text):
        if policy["name"] == name or name in policy.get("aliases", []):
            return set(policy["lib_whitelist"])
    return None


def elf_members(zf):
    """Yield each ELF file of a wheel with what it needs.

    Parameters
    ----------
    zf : zipfile.ZipFile
        The open wheel.

    Yields
    ------
    tuple of (str, list of str, list of str)
        The member's path, its DT_NEEDED entries and its run path entries (DT_RPATH and
        DT_RUNPATH together).
    """
    for info in zf.infolist():
        data = zf.read(info)
        if not data.startswith(b"\x7fELF"):
            continue
        needed, runpath = [], []
        for section in ELFFile(io.BytesIO(data)).iter_sections():
            if not isinstance(section, DynamicSection):
                continue
            for entry in section.iter_tags():
                if entry.entry.d_tag == "DT_NEEDED":
                    needed.append(entry.needed)
                elif entry.entry.d_tag == "DT_RPATH":
                    runpath.extend(entry.rpath.split(":"))
                elif entry.entry.d_tag == "DT_RUNPATH":
                    runpath.extend(entry.runpath.split(":"))
        yield info.filename, needed, runpath


def reaches(member, runpath, libdir):
    """Tell whether a run path of ``member`` leads to the directory ``libdir`` of the wheel.

    Parameters
    ----------
    member : str
        Path of the ELF file inside the wheel.
    runpath : list of str
        Its run path entries.
    libdir : str
        Path of the vendored libraries' directory inside the wheel.

    Returns
    -------
    bool
    """
    here = posixpath.dirname(member)
    for entry in runpath:
        if entry.startswith("$ORIGIN") and posixpath.normpath(
                posixpath.join(here, entry[len("$ORIGIN"):].lstrip("/"))) == libdir:
            return True
    return False


def check_repaired(wheel):
    """Check that a wheel is repaired: manylinux tags, every needed library accounted for.

    Parameters
    ----------
    wheel : str
        Path of the wheel.

    Returns
    -------
    list of str
        The problems found, one line each; empty when the wheel passes.
    """
    problems = []
    whitelists = []
    for tag in platform_tags(wheel):
        allowed = policy_whitelist(tag)
        if allowed is None:
            problems.append(f"platform tag {tag} is not a manylinux tag: the wheel is not repaired")
        else:
            whitelists.append(allowed)
    if problems:
        return problems
    system = set.intersection(*whitelists)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        vendored = {}
        for name in names:
            top, _, rest = name.partition("/")
            if top.endswith(".libs") and rest and "/" not in rest:
                vendored[rest] = top
        elves = list(elf_members(zf))
    if not elves:
        problems.append("the wheel holds no ELF file: no extension module was built")
    from_system, used = set(), set()
    for member, needed, runpath in elves:
        for lib in needed:
            if lib in vendored:
                if reaches(member, runpath, vendored[lib]):
                    used.add(lib)
                else:
                    problems.append(f"{member} needs {lib}, vendored in {vendored[lib]}/, "
                                    f"but its run path {runpath} does not lead there")
            elif lib in system:
                from_system.add(lib)
            else:
                problems.append(f"{member} needs {lib}, which is neither vendored in the wheel "
                                f"nor one the manylinux policy lets a system provide")
    for lib in sorted(set(vendored) - used):
        problems.append(f"{vendored[lib]}/{lib} is vendored but nothing in the wheel needs it")
    print(f"{posixpath.basename(wheel)}: {len(elves)} ELF files; "
          f"vendored: {', '.join(sorted(used)) or 'none'}; "
          f"from the system (manylinux policy): {', '.join(sorted(from_system)) or 'none'}")
    return problems


def check_same(wheel_a, wheel_b):
    """Check that two wheels hold the same files and the same metadata.

    Parameters
    ----------
    wheel_a, wheel_b : str
        Paths of the wheels.

    Returns
    -------
    list of str
        The problems found, one line each; empty when the wheels agree.
    """
    problems = []
    with zipfile.ZipFile(wheel_a) as za, zipfile.ZipFile(wheel_b) as zb:
        # Directory entries are left out: auditwheel writes them, scikit-build-core does not.
        names_a = {n for n in za.namelist() if not n.endswith("/")}
        names_b = {n for n in zb.namelist() if not n.endswith("/")}
        for name in sorted(names_a - names_b):
            problems.append(f"only in {posixpath.basename(wheel_a)}: {name}")
        for name in sorted(names_b - names_a):
            problems.append(f"only in {posixpath.basename(wheel_b)}: {name}")
        for name in sorted(names_a & names_b):
            if name.endswith((".dist-info/METADATA", ".dist-info/WHEEL")) or (
                    name.endswith(".py") or "/licenses/" in name):
                if za.read(name) != zb.read(name):
                    problems.append(f"{name} differs between the two wheels")
        print(f"{posixpath.basename(wheel_a)} and {posixpath.basename(wheel_b)}: "
              f"{len(names_a & names_b)} files in common")
    return problems


def main(argv):
    """Run one check named on the command line; return the exit status."""
    if len(argv) == 2 and argv[0] == "repaired":
        problems = check_repaired(argv[1])
    elif len(argv) == 3 and argv[0] == "same":
        problems = check_same(argv[1], argv[2])
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for problem in problems:
        print(f"check_wheel: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
