"""Which board profile the daemon runs with: by name, by file, or detected; and what it grants.

Profiles are validated on load exactly like the config: the TOML is turned into the records of
`board.schema`, checked across keys by `board.checks`, and every problem names the file, the key
and what was expected. `board.load` finds and reads them, `board.detection` picks one from the device
tree, `board.describe` says in words what one grants, and `board.parts` is the sensor parts
catalogue the `[[devices]]` are checked against (imported only for profiles that declare devices).

The names below are the ones callers use; every start loads a profile, so importing them costs
what importing the one module they came from did.
"""

from edgeclaw.board.describe import describe_device, describe_grants
from edgeclaw.board.detection import (
    DEVICE_TREE_COMPATIBLE,
    DEVICE_TREE_MODEL,
    FALLBACK_BOARD,
    detect,
    resolve,
)
from edgeclaw.board.load import iter_profiles, known_names, load_profile, profile_dirs, read_profile
from edgeclaw.board.schema import (
    DEVICE_NAME_MAX,
    BoardProfile,
    DeviceSpec,
    DisplayGrant,
    ESP32Grant,
    ESP32PinGrant,
    GPIOPinGrant,
    I2CBusGrant,
    MemoryRegionGrant,
    ProbeGrant,
    SerialPortGrant,
    SPIDeviceGrant,
    TargetRegion,
    format_ranges,
    region_holding,
)

__all__ = [
    "DEVICE_NAME_MAX",
    "DEVICE_TREE_COMPATIBLE",
    "DEVICE_TREE_MODEL",
    "FALLBACK_BOARD",
    "BoardProfile",
    "DeviceSpec",
    "DisplayGrant",
    "ESP32Grant",
    "ESP32PinGrant",
    "GPIOPinGrant",
    "I2CBusGrant",
    "MemoryRegionGrant",
    "ProbeGrant",
    "SPIDeviceGrant",
    "SerialPortGrant",
    "TargetRegion",
    "describe_device",
    "describe_grants",
    "detect",
    "format_ranges",
    "iter_profiles",
    "known_names",
    "load_profile",
    "profile_dirs",
    "read_profile",
    "region_holding",
    "resolve",
]
