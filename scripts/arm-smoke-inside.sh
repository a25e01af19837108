#!/bin/bash
# The part of scripts/arm-smoke that runs inside the emulated ARM system (as root in its chroot).
# /mnt/edgeclaw holds the wheel (dist/) and the tests, docs, bench and install-pi.sh (src/).
set -euo pipefail
SHARE=/mnt/edgeclaw
VENV=/opt/edgeclaw
say() { echo "arm-smoke: [$ARCH] $*"; }
stage_started=
stage() {
    local now
    now=$(date +%s)
    [[ -z $stage_started ]] || say "  ($((now - stage_started)) s)"
    stage_started=$now
    say "$*"
}
pip_install() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-warn-script-location "$@"; }

# docs/install.md, "By hand": spidev from the distribution (PyPI has no wheel of it), a virtualenv that
# sees the distribution's packages, and pip refusing anything it would have to compile.
HW_LIBRARIES=(smbus2 gpiozero pyserial)
if [[ $PHASE == deps ]]; then
    # The cached dependency layer: the apt packages, the wheel's requirements and the hardware
    # libraries (wheels only: --only-binary is the proof that nothing needs a compiler here, and there
    # is none to build with), and the test runner.
    stage "dependencies: apt-get install python3-spidev; python3 -m venv --system-site-packages $VENV"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-spidev >/dev/null
    apt-get clean
    python3 -m venv --system-site-packages "$VENV"
    stage "dependencies: pip install --only-binary=:all: the wheel's requirements, ${HW_LIBRARIES[*]}, the test runner"
    pip_install --only-binary=:all: -r "$SHARE/requirements.txt" "${HW_LIBRARIES[@]}" -r "$SHARE/test-requirements.txt"
    stage "done"
    exit 0
fi

stage "install: $VENV/bin/pip install --only-binary=:all: edgeclaw-*.whl ${HW_LIBRARIES[*]} (docs/install.md)"
pip_install --only-binary=:all: "$SHARE"/dist/edgeclaw-*.whl "${HW_LIBRARIES[@]}"
# Listed from the dist-info directories: `pip list` would cost seconds of emulated start-up.
say "  installed: $(cd "$VENV"/lib/python3*/site-packages && ls -d *.dist-info | sed 's/\.dist-info$//' | tr '\n' ' ')"
"$VENV/bin/python" -c 'import spidev, smbus2, gpiozero, serial' ||
    { say "FAILED: the hardware libraries do not import"; exit 1; }
say "  spidev, smbus2, gpiozero and pyserial import"

stage "edgeclaw --version"
version=$("$VENV/bin/edgeclaw" --version)
say "  $version"

stage "edgeclaw tool call i2c '{\"action\":\"scan\",\"bus\":1}' --board sim"
scan=$(EDGECLAW_STATE_DIR=/tmp/edgeclaw-scan "$VENV/bin/edgeclaw" tool call i2c '{"action":"scan","bus":1}' --board sim)
echo "$scan" | sed 's/^/    /'
for address in 0x48 0x50 0x76; do
    grep -q "$address" <<<"$scan" || { say "FAILED: the scan does not list the sim board's $address"; exit 1; }
done

stage "the daemon to READY=1; start-up and idle memory beside python3 (bench/bench_arm.py)"
"$VENV/bin/python" "$SHARE/src/bench/bench_arm.py" --runs 2 --settle 3

# install-pi.sh only when asked (--install-pi): under emulation even its dry run takes a minute.
INSTALL_PI_SH=$SHARE/src/scripts/install-pi.sh
if [[ $INSTALL_PI == real && -f $INSTALL_PI_SH ]]; then
    wheel=$(ls "$SHARE"/dist/edgeclaw-*.whl)
    stage "scripts/install-pi.sh --dry-run --from $(basename "$wheel")"
    bash "$INSTALL_PI_SH" --dry-run --from "$wheel" 2>&1 | sed 's/^/    /'
    stage "scripts/install-pi.sh --from $(basename "$wheel") (for real, in this throw-away overlay)"
    bash "$INSTALL_PI_SH" --from "$wheel" 2>&1 | sed 's/^/    /'
    stage "scripts/install-pi.sh again: nothing to change"
    bash "$INSTALL_PI_SH" --from "$wheel" 2>&1 | sed 's/^/    /'
    stage "scripts/install-pi.sh --uninstall"
    bash "$INSTALL_PI_SH" --uninstall 2>&1 | sed 's/^/    /'
fi

if [[ $RUN_TESTS == 1 ]]; then
    stage "the tests marked arm_smoke"
    cd "$SHARE/src"
    mapfile -t files < <(grep -l 'arm_smoke' tests/test_*.py)
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m arm_smoke "${files[@]}"
fi
stage "done"
