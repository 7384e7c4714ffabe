"""The simulated phone's shell: parses the command lines adb clients send and runs them.

Why a parser of its own: commands arrive as one string (`shell:input text 'a%sb'`), quoted the
way host tools quote for the device's /system/bin/sh. We split them with POSIX shlex and support
the sequencing host libraries rely on (`cmd1; cmd2`, `cmd1 && cmd2`, `echo ...$?` which adbutils
uses to read exit codes over the v1 shell). Pipes, redirections and variables other than `$?` are
not supported and fail with exit status 2 rather than being misinterpreted. A standalone quoted
`;` is indistinguishable from the operator (shlex limitation); quoted text containing `;` is fine.

Supported commands (the set UI-Venus / AndroidWorld style agents use; see `sim_device`):
input tap|swipe|draganddrop|text|keyevent, screencap [-p], wm size|density, getprop, am start|
force-stop|broadcast, monkey -p, pm list packages, ime list|enable|set, echo, true, and
`venus-state` (the phone state as JSON, read by success checks) and `venus-load REF` (put the
phone into a synthetic task's start state).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from venus_core.envs.sim_device import (
    ADB_IME,
    KEYCODES,
    DeviceCommandError,
    ShellResult,
    SimDevice,
)

MAX_COMMAND_BYTES = 16 * 1024
INPUT_SOURCES = {"keyboard", "mouse", "joystick", "touchnavigation", "touchpad", "trackball",
                 "stylus", "dpad", "gesture", "touchscreen", "gamepad", "rotaryencoder"}
OPERATORS = {";", "&&", "||", "|", "&", ";;", "|&"}


def _num(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise DeviceCommandError(f"input: {what} {text!r} is not a number") from None


def _keycode(text: str) -> int:
    if text.isdigit():
        return int(text)
    name = text if text.startswith("KEYCODE_") else "KEYCODE_" + text
    if name not in KEYCODES:
        raise DeviceCommandError(f"Error: Unknown keycode {text!r}")
    return KEYCODES[name]


def _input(dev: SimDevice, args: list[str]) -> str:
    if args and args[0] in INPUT_SOURCES:
        args = args[1:]
    if args and args[0] == "-d":  # display id
        args = args[2:]
    if not args:
        raise DeviceCommandError("usage: input [source] <tap|swipe|text|keyevent> ...")
    cmd, rest = args[0], args[1:]
    if cmd == "tap" and len(rest) == 2:
        dev.tap(_num(rest[0], "x"), _num(rest[1], "y"))
    elif cmd in ("swipe", "draganddrop") and len(rest) in (4, 5):
        x1, y1, x2, y2 = (_num(v, "coordinate") for v in rest[:4])
        ms = int(_num(rest[4], "duration")) if len(rest) == 5 else 300
        dev.swipe(x1, y1, x2, y2, ms)
    elif cmd == "text" and rest:
        text = " ".join(rest).replace("%s", " ")
        if not text.isascii():
            raise DeviceCommandError("input text: cannot inject non-ASCII characters "
                                     "(use the ADB keyboard)")
        dev.type_text(text)
    elif cmd == "keyevent" and rest:
        for k in (r for r in rest if r not in ("--longpress", "--doubletap")):
            dev.key(_keycode(k))
    else:
        raise DeviceCommandError(f"input: bad arguments {args!r}")
    return ""


def _component_package(component: str) -> str:
    return component.split("/", 1)[0]


def _am(dev: SimDevice, args: list[str]) -> str:
    if not args:
        raise DeviceCommandError("usage: am <start|force-stop|broadcast> ...")
    sub, rest = args[0], args[1:]
    if sub in ("start", "start-activity"):
        if "-n" not in rest or rest.index("-n") + 1 >= len(rest):
            raise DeviceCommandError("am start: only explicit components (-n pkg/.Activity)")
        comp = rest[rest.index("-n") + 1]
        if not dev.launch(_component_package(comp)):
            raise DeviceCommandError(f"Error: Activity class {{{comp}}} does not exist.")
        return f"Starting: Intent {{ cmp={comp} }}\n"
    if sub == "force-stop" and len(rest) == 1:
        dev.force_stop(rest[0])
        return ""
    if sub == "broadcast":
        action, extras, i = "", {}, 0
        while i < len(rest):
            flag = rest[i]
            if flag == "-a" and i + 1 < len(rest):
                action, i = rest[i + 1], i + 2
            elif flag in ("--es", "--ei", "--ez") and i + 2 < len(rest):
                extras[rest[i + 1]], i = rest[i + 2], i + 3
            else:
                raise DeviceCommandError(f"am broadcast: unsupported argument {flag!r}")
        if not action:
            raise DeviceCommandError("am broadcast: missing -a ACTION")
        return dev.broadcast(action, extras)
    raise DeviceCommandError(f"am: unsupported subcommand {sub!r}")


def _monkey(dev: SimDevice, args: list[str]) -> str:
    if "-p" not in args or args.index("-p") + 1 >= len(args):
        raise DeviceCommandError("monkey: only `monkey -p PACKAGE [-c CATEGORY] COUNT`")
    pkg = args[args.index("-p") + 1]
    if not dev.launch(pkg):
        raise DeviceCommandError("** No activities found to run, monkey aborted.", 252)
    return "Events injected: 1\n"


def _wm(dev: SimDevice, args: list[str]) -> str:
    if args == ["size"]:
        return f"Physical size: {dev.size[0]}x{dev.size[1]}\n"
    if args == ["density"]:
        return "Physical density: 320\n"
    raise DeviceCommandError(f"wm: unsupported arguments {args!r}")


def _pm(dev: SimDevice, args: list[str]) -> str:
    if args[:2] != ["list", "packages"]:
        raise DeviceCommandError(f"pm: unsupported arguments {args!r}")
    pkgs = dev.packages() + (["com.android.adbkeyboard"] if dev.adb_keyboard else [])
    flt = [a for a in args[2:] if not a.startswith("-")]
    return "".join(f"package:{p}\n" for p in pkgs if not flt or flt[0] in p)


def _ime(dev: SimDevice, args: list[str]) -> str:
    if args and args[0] == "list":
        return f"{ADB_IME}\n" if dev.adb_keyboard else ""
    if len(args) == 2 and args[0] == "enable":
        if not dev.adb_keyboard or args[1] != ADB_IME:
            raise DeviceCommandError(f"Unknown input method {args[1]} cannot be enabled")
        return f"Input method {args[1]}: already enabled for user #0\n"
    if len(args) == 2 and args[0] == "set":
        dev.set_ime(args[1])
        return f"Input method {args[1]} selected for user #0\n"
    raise DeviceCommandError(f"ime: unsupported arguments {args!r}")


def _screencap(dev: SimDevice, args: list[str]) -> bytes:
    files = [a for a in args if not a.startswith("-")]
    if files:
        raise DeviceCommandError("screencap: writing to a file is not supported; use stdout")
    return dev.screencap_png() if "-p" in args else dev.screencap_raw()


def _venus_load(dev: SimDevice, args: list[str]) -> str:
    """`venus-load REF`: put the phone into the start state of a synthetic task."""
    from venus_core.envs.base import EnvError
    from venus_core.envs.simphone import load_synth_task  # simphone builds on this module

    if len(args) != 1:
        raise DeviceCommandError("venus-load: expected one task reference (synth:...)")
    try:
        load_synth_task(dev, args[0])
    except EnvError as exc:
        raise DeviceCommandError(f"venus-load: {exc}") from None
    return "loaded\n"


Handler = Callable[[SimDevice, list[str]], "str | bytes"]
COMMANDS: dict[str, Handler] = {
    "input": _input, "am": _am, "monkey": _monkey, "wm": _wm, "pm": _pm, "ime": _ime,
    "screencap": _screencap,
    "getprop": lambda dev, a: dev.getprop(a),
    "venus-state": lambda dev, a: dev.state_json() + "\n",
    "venus-load": _venus_load,
    "true": lambda dev, a: "",
}


def _split(command: str) -> list[list[str] | str]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|<>")
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError as exc:
        raise DeviceCommandError(f"sh: syntax error: {exc}", 2) from None
    out: list[list[str] | str] = []
    cur: list[str] = []
    for tok in tokens:
        if tok in (";", "&&"):
            if cur:
                out.append(cur)
            out.append(tok)
            cur = []
        elif tok and set(tok) <= set(";&|<>"):
            raise DeviceCommandError(f"sh: {tok!r} is not supported by the simulated shell", 2)
        else:
            cur.append(tok)
    if cur:
        out.append(cur)
    return out


def run_command(dev: SimDevice, command: str) -> ShellResult:
    """Run one shell command line on `dev`; never raises for a bad command (exit status != 0)."""
    if len(command.encode()) > MAX_COMMAND_BYTES:
        return ShellResult(b"", f"sh: command longer than {MAX_COMMAND_BYTES} bytes\n".encode(), 2)
    stdout, stderr, both, status = bytearray(), bytearray(), bytearray(), 0
    try:
        parts = _split(command)
    except DeviceCommandError as exc:
        return ShellResult(b"", f"{exc}\n".encode(), exc.exit_code)
    skip = False
    for part in parts:
        if isinstance(part, str):
            skip = part == "&&" and status != 0
            continue
        if skip:
            continue
        name, args = part[0], part[1:]
        if name == "echo":
            text = (" ".join(a.replace("$?", str(status)) for a in args) + "\n").encode()
            stdout += text
            both += text
            status = 0
            continue
        handler = COMMANDS.get(name)
        if handler is None:
            err = f"/system/bin/sh: {name}: inaccessible or not found\n".encode()
            stderr += err
            both += err
            status = 127
            continue
        try:
            out = handler(dev, args)
            data = out if isinstance(out, bytes) else out.encode()
            stdout += data
            both += data
            status = 0
        except DeviceCommandError as exc:
            err = f"{exc}\n".encode()
            stderr += err
            both += err
            status = exc.exit_code
    return ShellResult(bytes(stdout), bytes(stderr), status, bytes(both))
