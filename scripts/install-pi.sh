#!/usr/bin/env bash
# Install edgeclaw as a systemd service on a Raspberry Pi (Raspberry Pi OS armhf or arm64) or
# another Debian board. Safe to run again: every step first checks what is there and changes
# only what differs, and says which. docs/install.md explains each step.
#
#   scripts/install-pi.sh [--dry-run] [--board NAME] [--console uart|gadget|none]
#                         [--sandbox firejail|bubblewrap] [--from CHECKOUT|WHEEL] [--root DIR]
#   scripts/install-pi.sh --uninstall [--purge] [--dry-run] [--root DIR]
#
# --dry-run prints every step and what it would do, changing nothing (no root needed).
# --root DIR writes into DIR as the system to install (an image being built, a test): files,
# the user and its groups, and the unit's enablement go there; what only the running system can
# do (apt, the Python install, udev and systemd reloads, raspi-config, doctor) is skipped, saying so.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
PREFIX=/opt/edgeclaw                 # the virtualenv: /opt/edgeclaw/bin/edgeclaw
UNIT=edgeclaw.service
MANIFEST_REL=var/lib/edgeclaw-install/manifest   # sha256 and path of every file this script wrote

DRY=0 UNINSTALL=0 PURGE=0 ROOT="" BOARD="" CONSOLE=none SANDBOX=firejail SOURCE="" ARCH=""
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
    case $1 in
        --dry-run) DRY=1 ;;
        --uninstall) UNINSTALL=1 ;;
        --purge) PURGE=1 ;;
        --root) ROOT=${2:?--root needs a directory}; shift ;;
        --board) BOARD=${2:?--board needs a profile name}; shift ;;
        --console) CONSOLE=${2:?--console needs uart, gadget or none}; shift ;;
        --sandbox) SANDBOX=${2:?--sandbox needs firejail or bubblewrap}; shift ;;
        --from) SOURCE=${2:?--from needs a checkout or a wheel}; shift ;;
        --arch) ARCH=${2:?--arch needs a Debian architecture}; shift ;;  # what dpkg would say
        -h|--help) usage; exit 0 ;;
        *) echo "install-pi: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case $CONSOLE in uart|gadget|none) ;; *) echo "install-pi: --console must be uart, gadget or none, not '$CONSOLE'" >&2; exit 2 ;; esac
case $SANDBOX in firejail|bubblewrap) ;; *) echo "install-pi: --sandbox must be firejail or bubblewrap, not '$SANDBOX'" >&2; exit 2 ;; esac
((PURGE == 0 || UNINSTALL == 1)) || { echo "install-pi: --purge goes with --uninstall" >&2; exit 2; }
if [[ -n $ROOT ]]; then
    [[ -d $ROOT ]] || { echo "install-pi: --root $ROOT is not a directory" >&2; exit 2; }
    ROOT="$(cd "$ROOT" && pwd)"
    [[ $ROOT != / ]] || ROOT=""
fi
if ((DRY == 0)) && [[ $(id -u) -ne 0 ]]; then
    echo "install-pi: run as root (sudo $0 ...), or look first with --dry-run" >&2
    exit 2
fi

if ((DRY == 0 && UNINSTALL == 0)) && [[ ! -f $here/../systemd/edgeclaw.service ]]; then
    echo "install-pi: run it from a checkout (scripts/install-pi.sh): it installs the files in systemd/ from there" >&2
    exit 2
fi

# The running system, as opposed to a root being written (--root) or a chroot (no systemd inside):
# only there are services started, udev rules applied and raspi-config asked.
LIVE=0
[[ -z $ROOT && -d /run/systemd/system ]] && LIVE=1

changes=0 step_no=0 reboot_notes=()
step() { step_no=$((step_no + 1)); echo; echo "[$step_no] $*"; }
say() { echo "    $*"; }
changed() { changes=$((changes + 1)); say "$@"; }
would_or_do() {  # would_or_do TEXT CMD...: run CMD (or say it would), counted as a change
    local text=$1; shift
    if ((DRY)); then changed "would $text: $*"; else changed "$text: $*"; "$@"; fi
}
skip() { say "skipped: $*"; }

# --- files, each recorded in the manifest so --uninstall removes exactly what is ours ------------
manifest="$ROOT/$MANIFEST_REL"
record() {  # record PATH (as seen in the installed system)
    ((DRY)) && return 0
    local sum
    sum=$(sha256sum "$ROOT$1" | cut -d' ' -f1)
    mkdir -p "$(dirname "$manifest")"
    [[ -f $manifest ]] || : >"$manifest"
    if ! grep -qxF "$sum  $1" "$manifest"; then
        grep -vF "  $1" "$manifest" >"$manifest.new" || true
        echo "$sum  $1" >>"$manifest.new"
        mv "$manifest.new" "$manifest"
    fi
}
put_file() {  # put_file PATH MODE OWNER:GROUP SOURCE_FILE: install it unless it is already the same
    local path=$1 mode=$2 owner=$3 src=$4 dest="$ROOT$1"
    if [[ -f $dest ]] && cmp -s "$src" "$dest"; then
        say "ok: $path is up to date"
        record "$path"
        return 0
    fi
    local verb=write done=wrote
    [[ -e $dest ]] && verb=update done=updated
    if ((DRY)); then changed "would $verb $path"; return 0; fi
    install -D -m "$mode" "$src" "$dest"
    chown_in_root "$owner" "$dest"
    changed "$done $path"
    record "$path"
}
chown_in_root() {  # owner:group named as in the installed system (its /etc/passwd under --root)
    local owner=${1%%:*} group=${1##*:} dest=$2 uid gid
    # Numbers from the installed system's files: a root being built may not have root's entry yet.
    uid=$(id_of passwd "$owner" || true)
    gid=$(id_of group "$group" || true)
    if [[ -n $uid && -n $gid ]]; then chown "$uid:$gid" "$dest"; fi  # no such user yet: root keeps it
}
remove_ours() {  # remove_ours PATH: delete it when it is still what we wrote; keep an edited one
    local path=$1 dest="$ROOT$1" sum want
    [[ -e $dest || -L $dest ]] || { say "ok: $path is not there"; return 0; }
    want=$(awk -v p="$path" '{ s = $1; $1 = ""; sub(/^ +/, ""); if ($0 == p) print s }' "$manifest" 2>/dev/null || true)
    sum=$(sha256sum "$dest" | cut -d' ' -f1)
    if [[ -z $want ]]; then say "kept: $path (not written by this script)"; return 0; fi
    if [[ $sum != "$want" ]] && ((PURGE == 0)); then
        say "kept: $path (changed since it was installed; --purge removes it)"
        return 0
    fi
    if ((DRY)); then changed "would remove $path"; return 0; fi
    rm -f "$dest"
    changed "removed $path"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- where edgeclaw comes from, and a Python that can import it for the steps below --------------
if [[ -z $SOURCE && -f $here/../pyproject.toml ]]; then SOURCE="$(cd "$here/.." && pwd)"; fi
[[ -z $SOURCE || -e $SOURCE ]] || { echo "install-pi: --from $SOURCE does not exist" >&2; exit 2; }
ec_python() {  # python3 with edgeclaw importable: the installed one, else the checkout's source
    if [[ -z $ROOT && -x $PREFIX/bin/python ]] && "$PREFIX/bin/python" -c 'import edgeclaw' 2>/dev/null; then
        "$PREFIX/bin/python" "$@"
    elif [[ -n $SOURCE && -d $SOURCE/edgeclaw ]]; then
        PYTHONPATH="$SOURCE${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"
    else
        return 3
    fi
}

# ================================================================================================
uninstall() {
    step "the service: stop and disable $UNIT"
    if [[ ! -e $ROOT/etc/systemd/system/$UNIT ]]; then
        say "ok: $UNIT is not installed"
    elif ((LIVE)); then
        would_or_do "stop and disable" systemctl disable --now "$UNIT"
    elif [[ -L $ROOT/etc/systemd/system/multi-user.target.wants/$UNIT ]]; then
        if command -v systemctl >/dev/null; then
            would_or_do "disable" systemctl --root="${ROOT:-/}" disable "$UNIT"
        else
            would_or_do "disable" rm -f "$ROOT/etc/systemd/system/multi-user.target.wants/$UNIT"
        fi
    else
        say "ok: $UNIT is not enabled"
    fi
    step "files this script installed"
    local path
    for path in /etc/systemd/system/$UNIT /etc/systemd/system/$UNIT.d/install-pi.conf \
        /etc/udev/rules.d/60-edgeclaw.rules /etc/modules-load.d/edgeclaw.conf \
        /etc/sysusers.d/edgeclaw.conf /etc/tmpfiles.d/edgeclaw.conf /etc/edgeclaw/edgeclaw.toml; do
        remove_ours "$path"
    done
    if [[ -d $ROOT/etc/systemd/system/$UNIT.d ]] && ((DRY == 0)); then
        rmdir --ignore-fail-on-non-empty "$ROOT/etc/systemd/system/$UNIT.d"
    fi
    if [[ -L $ROOT/usr/local/bin/edgeclaw ]]; then
        would_or_do "remove the command link" rm -f "$ROOT/usr/local/bin/edgeclaw"
    fi
    if ((LIVE)) && ((changes)); then
        would_or_do "reload" systemctl daemon-reload
        command -v udevadm >/dev/null && would_or_do "reload udev rules" udevadm control --reload
    fi
    step "the Python install in $PREFIX"
    if [[ -d $ROOT$PREFIX ]]; then would_or_do "remove" rm -rf "$ROOT$PREFIX"; else say "ok: not there"; fi
    step "state, configuration and the edgeclaw user"
    if ((PURGE)); then
        local dir
        for dir in /var/lib/edgeclaw /etc/edgeclaw; do
            [[ -e $ROOT$dir ]] && would_or_do "remove" rm -rf "$ROOT$dir"
        done
        if grep -q '^edgeclaw:' "$ROOT/etc/passwd" 2>/dev/null; then
            would_or_do "remove the user" userdel ${ROOT:+--root "$ROOT"} edgeclaw
        fi
        say "the groups i2c, spi, gpio and dialout stay: other programs use them"
    else
        say "kept: /var/lib/edgeclaw (sessions, memory, jobs), what is left in /etc/edgeclaw and the edgeclaw user (--purge removes them)"
    fi
    say "kept: config.txt's dtparam/enable_uart/dtoverlay lines and cmdline.txt: the buses stay on for other programs"
    if ((DRY == 0)) && [[ -f $manifest ]]; then rm -f "$manifest"; rmdir --ignore-fail-on-non-empty "$(dirname "$manifest")"; fi
    echo
    if ((DRY)); then echo "install-pi: dry run: $changes change(s) would be made"; else echo "install-pi: uninstalled: $changes change(s)"; fi
}

# ================================================================================================
detect() {
    step "this machine: architecture and board"
    [[ -n $ARCH ]] || ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
    local cpu; cpu=$(uname -m)
    say "architecture: $ARCH (CPU $cpu)"
    case $ARCH in
        armhf) say "32-bit Raspberry Pi OS: PyPI lacks ARM wheels for some packages, so they come from apt (python3-...)" ;;
        arm64) say "64-bit Raspberry Pi OS / Debian arm64: every dependency has a wheel on PyPI" ;;
        *) say "not ARM: fine for a trial; this script targets Raspberry Pi OS armhf and arm64" ;;
    esac
    [[ $cpu == armv6l ]] && say "ARMv6 (Pi Zero W / Pi 1): expect a slow first start while Python compiles its bytecode"
    if [[ -n $BOARD ]]; then
        say "board: $BOARD (--board)"
    else
        local dt="$ROOT/proc/device-tree"
        BOARD=$(ec_python - "$dt/model" "$dt/compatible" <<'EOF' 2>/dev/null || echo generic-linux
import sys
from pathlib import Path
from edgeclaw import board
found = board.detect(Path(sys.argv[1]), Path(sys.argv[2]))
print(found.name if found else board.FALLBACK_BOARD)
EOF
)
        local model; model=$(tr -d '\0' 2>/dev/null <"$dt/model" || echo "no device-tree model")
        say "board: $BOARD (device tree: $model)"
    fi
    ec_python - "$BOARD" <<'EOF' >/dev/null 2>&1 || { [[ $? -eq 3 ]] || { echo "install-pi: no board profile named '$BOARD' (edgeclaw board show NAME lists what one holds)" >&2; exit 2; }; }
import sys
from edgeclaw import board
board.load_profile(sys.argv[1], "install-pi")
EOF
    case $BOARD in rpi*) IS_PI=1 ;; *) IS_PI=0 ;; esac
}

packages() {
    step "system packages (apt)"
    # python3-venv for the virtualenv, the sandbox, and the one compiled Python package edgeclaw's
    # hardware path needs: PyPI has no wheel of spidev for any architecture, Debian has python3-spidev
    # (the virtualenv sees it: --system-site-packages). lgpio, gpiozero's pin driver, comes from
    # Raspberry Pi OS's own archive. docs/install.md lists what comes from where per architecture.
    local want=(python3 python3-venv python3-spidev "$SANDBOX")
    ((IS_PI)) && want+=(python3-lgpio)
    [[ $CONSOLE == none ]] || want+=(picocom)
    if [[ -n $ROOT ]]; then skip "--root: install inside that system (${want[*]})"; return 0; fi
    local missing=() absent=() pkg
    for pkg in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
        if apt-cache show "$pkg" >/dev/null 2>&1; then missing+=("$pkg"); else absent+=("$pkg"); fi
    done
    ((${#absent[@]} == 0)) || say "not in this system's apt sources: ${absent[*]} (Raspberry Pi OS has python3-lgpio; without it gpiozero falls back to its other pin drivers)"
    if ((${#missing[@]} == 0)); then say "ok: installed: ${want[*]}"; return 0; fi
    # Without recommends: firejail's would bring a desktop (xpra), pip's a compiler.
    would_or_do "install" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

python_install() {
    step "edgeclaw in a virtualenv at $PREFIX"
    if [[ -n $ROOT ]]; then skip "--root: Python installs run inside the target system (this script in a chroot there)"; return 0; fi
    if [[ -z $SOURCE ]]; then
        if ((DRY)); then say "would install from: nothing found (give --from CHECKOUT or a wheel)"; return 0; fi
        echo "install-pi: where from? give --from with a checkout or a wheel" >&2; exit 2
    fi
    local want_version have_version=""
    if [[ -d $SOURCE ]]; then
        want_version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$SOURCE/edgeclaw/__init__.py")
    else
        want_version=$(basename "$SOURCE" | cut -d- -f2)
    fi
    [[ -x $PREFIX/bin/edgeclaw ]] && have_version=$("$PREFIX/bin/edgeclaw" --version 2>/dev/null | awk '{print $2}')
    # The checkout's commit (or the wheel's digest) as installed: a change of source reinstalls.
    local stamp="$PREFIX/.installed-from" want_stamp
    if [[ -d $SOURCE/.git ]]; then want_stamp="$(git -C "$SOURCE" rev-parse HEAD 2>/dev/null)$(git -C "$SOURCE" status --porcelain -- edgeclaw pyproject.toml 2>/dev/null | sha256sum | cut -c1-12)"
    else want_stamp=$(find "$SOURCE" -type f \( -name '*.py' -o -name '*.toml' -o -name '*.whl' \) -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16); fi
    if [[ -n $have_version && -f $stamp && $(cat "$stamp") == "$want_stamp" ]]; then
        say "ok: edgeclaw $have_version is installed from $SOURCE"
        return 0
    fi
    if [[ ! -x $PREFIX/bin/python ]]; then
        # --system-site-packages: the apt packages above (python3-spidev, ...) count as installed.
        would_or_do "create the virtualenv" python3 -m venv --system-site-packages "$PREFIX"
    fi
    # --only-binary: nothing is compiled on the board (a Pi Zero has neither the compiler nor the
    # time). The hw extra's pure-Python parts come from PyPI; its spidev came from apt above.
    would_or_do "install edgeclaw $want_version (was ${have_version:-none})" \
        "$PREFIX/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
        "$SOURCE" smbus2 gpiozero pyserial
    ((DRY)) || echo "$want_stamp" >"$stamp"
    if [[ ! -L /usr/local/bin/edgeclaw ]]; then
        would_or_do "link the command" ln -sfn "$PREFIX/bin/edgeclaw" /usr/local/bin/edgeclaw
    fi
}

user_and_groups() {
    step "the system user edgeclaw and its groups (i2c, spi, gpio, dialout)"
    put_file /etc/sysusers.d/edgeclaw.conf 0644 root:root "$here/../systemd/edgeclaw.sysusers.conf"
    local missing=() name
    grep -q '^edgeclaw:' "$ROOT/etc/passwd" 2>/dev/null || missing+=("user edgeclaw")
    for name in i2c spi gpio dialout; do
        grep -qE "^$name:[^:]*:[0-9]+:(.*,)?edgeclaw(,|$)" "$ROOT/etc/group" 2>/dev/null || missing+=("edgeclaw in $name")
    done
    if ((${#missing[@]} == 0)); then say "ok: the user and its groups exist"; return 0; fi
    say "to do: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')"
    if command -v systemd-sysusers >/dev/null; then
        would_or_do "create" systemd-sysusers --root="${ROOT:-/}" "$ROOT/etc/sysusers.d/edgeclaw.conf"
    else
        would_or_do "create the user" useradd ${ROOT:+--root "$ROOT"} --system --home-dir /var/lib/edgeclaw --shell /usr/sbin/nologin --user-group edgeclaw
        for name in i2c spi gpio dialout; do
            grep -q "^$name:" "$ROOT/etc/group" || would_or_do "create the group" groupadd ${ROOT:+--root "$ROOT"} --system "$name"
            would_or_do "add to $name" usermod ${ROOT:+--root "$ROOT"} -aG "$name" edgeclaw
        done
    fi
}

directories() {
    step "directories: /etc/edgeclaw (0770 root:edgeclaw) and /var/lib/edgeclaw (0750 edgeclaw)"
    put_file /etc/tmpfiles.d/edgeclaw.conf 0644 root:root "$here/../systemd/edgeclaw.tmpfiles.conf"
    if dir_is /etc/edgeclaw 770 root edgeclaw && dir_is /var/lib/edgeclaw 750 edgeclaw edgeclaw; then
        say "ok: both exist with their owners and modes"
    elif command -v systemd-tmpfiles >/dev/null; then
        would_or_do "create" systemd-tmpfiles --root="${ROOT:-/}" --create "$ROOT/etc/tmpfiles.d/edgeclaw.conf"
    else
        # What the tmpfiles lines say, by hand (no systemd here yet).
        would_or_do "create" make_dir /etc/edgeclaw 0770 root:edgeclaw
        would_or_do "create" make_dir /var/lib/edgeclaw 0750 edgeclaw:edgeclaw
    fi
}
id_of() {  # id_of passwd|group NAME: the number in the installed system's file (root is 0)
    [[ $2 == root ]] && { echo 0; return 0; }
    awk -F: -v n="$2" '$1 == n {print $3}' "$ROOT/etc/$1" 2>/dev/null
}
dir_is() {  # dir_is PATH MODE OWNER GROUP
    [[ -d $ROOT$1 ]] && [[ $(stat -c '%a %u %g' "$ROOT$1") == "$2 $(id_of passwd "$3") $(id_of group "$4")" ]]
}
make_dir() {  # make_dir PATH MODE OWNER:GROUP
    install -d -m "$2" "$ROOT$1"
    chmod "$2" "$ROOT$1"
    chown_in_root "$3" "$ROOT$1"
}

udev_rules() {
    step "udev rules: the device files the $BOARD profile grants, for the service's groups"
    if ! ec_python - "$BOARD" "$CONSOLE" >"$tmp/rules" <<'EOF'
import os
import sys
from edgeclaw import board

profile = board.load_profile(sys.argv[1], "install-pi")
spec = profile.spec
out = [f"# The device files the {profile.name} profile grants, for the groups the edgeclaw service runs",
       "# with (SupplementaryGroups= in edgeclaw.service). Written by scripts/install-pi.sh."]
def rule(kernel, subsystem, group, why):
    match = f'SUBSYSTEM=="{subsystem}", ' if subsystem else ""
    out.append(f'{match}KERNEL=="{kernel}", GROUP="{group}", MODE="0660"  # {why}')
for g in spec.i2c:
    rule(os.path.basename(g.device or f"/dev/i2c-{g.bus}"), "i2c-dev", "i2c", f"I2C bus {g.bus}")
for s in spec.spi:
    rule(os.path.basename(s.device or f"/dev/spidev{s.bus}.{s.chip_select}"), "spidev", "spi",
         f"SPI {s.bus}.{s.chip_select}")
if spec.gpio:
    rule("gpiochip*", "gpio", "gpio", f"{len(spec.gpio)} GPIO pin(s)")
for m in spec.memory:
    if os.path.basename(m.device) == "gpiomem":
        rule("gpiomem", "", "gpio", f"memory region {m.name}")
    else:
        out.append(f"# memory region {m.name} ({m.device}): root only (CAP_SYS_RAWIO), no rule gives it a group")
ports = [p.path for p in spec.serial] + ([spec.esp32.port] if spec.esp32 and spec.esp32.port != "sim" else [])
for path in ports:
    rule(os.path.basename(path), "tty", "dialout", f"serial port {path}")
if sys.argv[2] == "uart":
    rule("ttyAMA[0-9]*", "tty", "dialout", "the console on the UART (/dev/serial0)")
    rule("ttyS0", "tty", "dialout", "the console on the mini UART (/dev/serial0)")
elif sys.argv[2] == "gadget":
    rule("ttyGS[0-9]*", "tty", "dialout", "the console on the USB gadget serial port")
print("\n".join(out))
EOF
    then
        skip "no edgeclaw to read the profile with (give --from CHECKOUT)"
        return 0
    fi
    local before=$changes
    put_file /etc/udev/rules.d/60-edgeclaw.rules 0644 root:root "$tmp/rules"
    if ((changes > before)); then
        if ((LIVE)) && command -v udevadm >/dev/null; then
            would_or_do "apply" udevadm control --reload
            would_or_do "apply" udevadm trigger --subsystem-match=i2c-dev --subsystem-match=spidev --subsystem-match=gpio --subsystem-match=tty
        else
            say "(applied at the next boot: not the running system)"
        fi
    fi
}

boot_config() {  # the Pi's config.txt: /boot/firmware on bookworm, /boot before
    local f
    for f in "$ROOT/boot/firmware/config.txt" "$ROOT/boot/config.txt"; do [[ -f $f ]] && { echo "$f"; return 0; }; done
    return 1
}
ensure_line() {  # ensure_line FILE LINE WHY: append LINE unless it is there
    local file=$1 line=$2 why=$3
    if grep -qxF "$line" "$file" 2>/dev/null; then say "ok: ${file#"$ROOT"} has $line"; return 0; fi
    if ((DRY)); then changed "would add '$line' to ${file#"$ROOT"} ($why)"; return 0; fi
    printf '%s\n' "$line" >>"$file"
    changed "added '$line' to ${file#"$ROOT"} ($why)"
    reboot_notes+=("$why")
}

buses() {
    step "I2C and SPI on: dtparams in config.txt (raspi-config nonint where it runs), i2c-dev loaded at boot"
    if ((IS_PI == 0)); then skip "not a Raspberry Pi ($BOARD): the board's own tools enable its buses"; return 0; fi
    if ((LIVE)) && command -v raspi-config >/dev/null; then
        local what fn
        for what in i2c spi; do
            fn=do_$what
            if [[ $(raspi-config nonint get_$what) == 0 ]]; then say "ok: $what is on (raspi-config)"; else
                would_or_do "turn $what on" raspi-config nonint "$fn" 0; reboot_notes+=("$what turned on"); fi
        done
    else
        local cfg
        if ! cfg=$(boot_config); then skip "no config.txt under ${ROOT:-/}boot (not a Raspberry Pi OS image?)"; return 0; fi
        ensure_line "$cfg" "dtparam=i2c_arm=on" "I2C on"
        ensure_line "$cfg" "dtparam=spi=on" "SPI on"
    fi
    modules_load
}

modules_load() {
    local want=(i2c-dev)
    [[ $CONSOLE == gadget ]] && want+=(dwc2 g_serial)
    printf '%s\n' "# Kernel modules edgeclaw's devices need at boot. Written by scripts/install-pi.sh." "${want[@]}" >"$tmp/modules"
    put_file /etc/modules-load.d/edgeclaw.conf 0644 root:root "$tmp/modules"
}

console_port() {
    step "the technician console: $CONSOLE"
    case $CONSOLE in
        none) say "not asked for (--console uart puts it on the UART, --console gadget on the USB gadget port)"; return 0 ;;
        uart) CONSOLE_PORT=/dev/serial0 ;;
        gadget) CONSOLE_PORT=/dev/ttyGS0 ;;
    esac
    if ((IS_PI == 0)); then skip "not a Raspberry Pi: set console.ports to the board's serial port yourself"; return 0; fi
    local cfg
    if ((LIVE)) && command -v raspi-config >/dev/null && [[ $CONSOLE == uart ]]; then
        # The kernel's console and a login getty must leave the UART to edgeclaw.
        if [[ $(raspi-config nonint get_serial_cons 2>/dev/null) == 1 && $(raspi-config nonint get_serial_hw 2>/dev/null) == 0 ]]; then
            say "ok: the UART is on, without a login console"
        else
            would_or_do "free the UART" raspi-config nonint do_serial_cons 1
            would_or_do "turn the UART on" raspi-config nonint do_serial_hw 0
            reboot_notes+=("UART console freed")
        fi
    elif cfg=$(boot_config); then
        if [[ $CONSOLE == uart ]]; then
            ensure_line "$cfg" "enable_uart=1" "UART on"
            local cmdline; cmdline="$(dirname "$cfg")/cmdline.txt"
            if grep -qE 'console=(serial0|ttyAMA0|ttyS0),[0-9]+' "$cmdline" 2>/dev/null; then
                if ((DRY)); then changed "would remove the kernel's serial console from ${cmdline#"$ROOT"}"; else
                    sed -i -E 's/ ?console=(serial0|ttyAMA0|ttyS0),[0-9]+//' "$cmdline"
                    changed "removed the kernel's serial console from ${cmdline#"$ROOT"}"; reboot_notes+=("UART console freed"); fi
            else
                say "ok: no kernel console on the UART"
            fi
        else
            ensure_line "$cfg" "dtoverlay=dwc2" "USB gadget mode (the Zero's USB port, a Pi 4/5's USB-C)"
        fi
    else
        skip "no config.txt under ${ROOT:-/}boot"
    fi
    [[ $CONSOLE == gadget ]] && modules_load
    local unit="serial-getty@${CONSOLE_PORT#/dev/}.service"
    if [[ -L $ROOT/etc/systemd/system/getty.target.wants/$unit ]]; then
        would_or_do "stop a login getty on the port" systemctl --root="${ROOT:-/}" disable "$unit"
    fi
}

config_file() {
    step "/etc/edgeclaw/edgeclaw.toml for $BOARD (every key commented at its default)"
    local path=/etc/edgeclaw/edgeclaw.toml
    if [[ -f $ROOT$path ]]; then
        say "ok: $path exists; kept as it is (never overwritten)"
        if [[ $CONSOLE != none ]] && ! grep -qE '^\s*ports\s*=.*'"${CONSOLE_PORT:-}" "$ROOT$path"; then
            say "note: for the console add under [console]: ports = [\"$CONSOLE_PORT\"]"
        fi
        record_if_ours "$path"
        return 0
    fi
    if ! ec_python - "$BOARD" "${CONSOLE_PORT:-}" "$SANDBOX" >"$tmp/edgeclaw.toml" <<'EOF'
import sys
from edgeclaw.config.render import render_sample

board, port, sandbox = sys.argv[1:4]
lines = render_sample().splitlines()
def set_key(table, key, value):
    """Uncomment `table`'s header (None: the top level) and its `key`, set to `value`."""
    start = 0
    if table is not None:
        start = lines.index(f"# [{table}]")
        lines[start] = f"[{table}]"
    for i in range(start, len(lines)):
        if i > start and lines[i].startswith("# ["):
            break
        if lines[i].startswith(f"# {key} = "):
            lines[i] = f"{key} = {value}"
            return
    raise SystemExit(f"the sample has no {table}.{key}")
set_key(None, "board", f'"{board}"')
if port:
    set_key("console", "ports", f'["{port}"]')
if sandbox != "firejail":
    set_key("sandbox", "backend", f'"{sandbox}"')
head = f"# Written by scripts/install-pi.sh for the {board} board; edit freely, it is never overwritten.\n"
print(head + "\n".join(lines))
EOF
    then
        skip "no edgeclaw to write the sample with (give --from CHECKOUT)"
        return 0
    fi
    # The file this script writes must be one the daemon accepts.
    if ! ec_python -c 'import sys; from edgeclaw.config.loader import load_config; load_config(sys.argv[1])' \
        "$tmp/edgeclaw.toml" >"$tmp/check" 2>&1; then
        cat "$tmp/check" >&2
        echo "install-pi: the generated config does not pass edgeclaw config check (above)" >&2
        exit 1
    fi
    put_file "$path" 0640 root:edgeclaw "$tmp/edgeclaw.toml"
}
record_if_ours() { [[ -f $manifest ]] && grep -qF "  $1" "$manifest" && record "$1"; return 0; }

unit_file() {
    local src=edgeclaw.service
    [[ $SANDBOX == bubblewrap ]] && src=edgeclaw-bubblewrap.service
    step "the systemd unit $UNIT ($src) running $PREFIX/bin/edgeclaw run"
    local before=$changes
    put_file "/etc/systemd/system/$UNIT" 0644 root:root "$here/../systemd/$src"
    printf '%s\n' "# Written by scripts/install-pi.sh: the virtualenv's edgeclaw, not /usr/bin's." "[Service]" \
        "ExecStart=" "ExecStart=$PREFIX/bin/edgeclaw run" >"$tmp/dropin"
    put_file "/etc/systemd/system/$UNIT.d/install-pi.conf" 0644 root:root "$tmp/dropin"
    UNIT_CHANGED=$((changes > before))
    # -L: the link points at /etc/... as the installed system sees it, which under --root is not here.
    if [[ -L $ROOT/etc/systemd/system/multi-user.target.wants/$UNIT ]]; then
        say "ok: $UNIT is enabled"
    elif ((LIVE)); then
        would_or_do "reload" systemctl daemon-reload
        would_or_do "enable" systemctl enable "$UNIT"
    elif command -v systemctl >/dev/null; then
        would_or_do "enable" systemctl --root="${ROOT:-/}" enable "$UNIT"
    else
        # No systemd here yet (a minimal root): the link `systemctl enable` makes, by hand.
        would_or_do "enable" link_wanted "$UNIT"
    fi
    if ((LIVE && UNIT_CHANGED)) && [[ -L /etc/systemd/system/multi-user.target.wants/$UNIT ]]; then
        would_or_do "reload" systemctl daemon-reload
    fi
}

link_wanted() {  # what `systemctl enable` does for WantedBy=multi-user.target
    mkdir -p "$ROOT/etc/systemd/system/multi-user.target.wants"
    ln -s "/etc/systemd/system/$1" "$ROOT/etc/systemd/system/multi-user.target.wants/$1"
}

doctor() {
    step "edgeclaw doctor, as the service's user"
    if [[ -n $ROOT ]]; then skip "--root: doctor checks the running system (run it there)"; return 0; fi
    if [[ ! -x $PREFIX/bin/edgeclaw ]]; then
        if ((DRY)); then say "would run: runuser -u edgeclaw -- $PREFIX/bin/edgeclaw doctor"; else skip "edgeclaw is not installed"; fi
        return 0
    fi
    if ((DRY)); then say "would run: runuser -u edgeclaw -- $PREFIX/bin/edgeclaw doctor"; return 0; fi
    if runuser -u edgeclaw -- env EDGECLAW_STATE_DIR=/var/lib/edgeclaw "$PREFIX/bin/edgeclaw" doctor \
        --config /etc/edgeclaw/edgeclaw.toml 2>&1 | sed 's/^/    /'; then
        say "doctor: every check passed"
    else
        say "doctor found problems (above): the install is in place; fix them and run edgeclaw doctor again"
    fi
}

start() {
    step "start the service"
    if ((LIVE == 0)); then skip "not the running system: it starts at the next boot"; return 0; fi
    if ((${#reboot_notes[@]})); then skip "a reboot comes first (below); it starts then"; return 0; fi
    if systemctl is-active -q "$UNIT"; then
        if ((changes)); then would_or_do "restart (something changed)" systemctl restart "$UNIT"; else say "ok: running"; fi
    else
        would_or_do "start" systemctl start "$UNIT"
    fi
}

if ((UNINSTALL)); then
    echo "install-pi: removing edgeclaw${ROOT:+ from $ROOT}$( ((DRY)) && echo ' (dry run: nothing is changed)')"
    uninstall
    exit 0
fi
echo "install-pi: installing edgeclaw${ROOT:+ into $ROOT}$( ((DRY)) && echo ' (dry run: nothing is changed)')"
IS_PI=0 CONSOLE_PORT="" UNIT_CHANGED=0
detect
packages
python_install
user_and_groups
directories
udev_rules
buses
console_port
config_file
unit_file
doctor
start
echo
if ((${#reboot_notes[@]})); then
    echo "install-pi: REBOOT NEEDED for: $(printf '%s; ' "${reboot_notes[@]}" | sed 's/; $//') (sudo reboot)"
fi
if ((DRY)); then echo "install-pi: dry run: $changes change(s) would be made"; else echo "install-pi: done: $changes change(s)"; fi
