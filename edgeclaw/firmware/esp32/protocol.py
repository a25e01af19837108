# The edgeclaw ESP32 bridge protocol, device side.
#
# Written for MicroPython on the ESP32 and runs unchanged under CPython
# (the tests and the sim board serve it behind a pty): it uses only `json`
# and plain classes, no typing module or dataclasses (f-strings need MicroPython 1.17+).
#
# Wire format: JSON lines, UTF-8, one object per line, at most MAX_LINE bytes.
#   request  {"id": 7, "op": "gpio.read", "args": {"pin": 4}}
#   reply    {"id": 7, "ok": true, "result": {"pin": 4, "value": 1}}
#            {"id": 7, "ok": false, "error": "GPIO 40 does not exist"}
#   event    {"event": "boot", "protocol": 1, "firmware": "...", "reset_cause": "..."}
# The host sends "hello" first and checks the protocol number. A boot event
# at any time means the chip reset: every request in flight is lost.

import json

PROTOCOL = 1
FIRMWARE = "edgeclaw-esp32 1.0.0"
MAX_LINE = 1024

# ESP32 (WROOM/WROVER) GPIO facts from the datasheet.
GPIO_PINS = tuple(p for p in range(40) if p not in (20, 24, 28, 29, 30, 31))
INPUT_ONLY = (34, 35, 36, 37, 38, 39)
FLASH_PINS = (6, 7, 8, 9, 10, 11)  # wired to the SPI flash: touching them crashes the chip
ADC1_PINS = (32, 33, 34, 35, 36, 37, 38, 39)  # ADC2 is unusable while Wi-Fi runs
# 7-bit I2C addresses a device may have: 0000xxx and 1111xxx are reserved (MicroPython's scan range).
I2C_FIRST = 0x08
I2C_LAST = 0x77


class BridgeError(Exception):
    pass


def _int_arg(args, name, lo, hi):
    value = args.get(name)
    if type(value) is not int:
        raise BridgeError("argument '" + name + "' must be an integer")
    if value < lo or value > hi:
        raise BridgeError(
            "argument '" + name + "' must be " + str(lo) + ".." + str(hi) + ", got " + str(value)
        )
    return value


def _pin(args, output=False):
    pin = _int_arg(args, "pin", 0, 39)
    if pin not in GPIO_PINS:
        raise BridgeError("GPIO " + str(pin) + " does not exist on the ESP32")
    if pin in FLASH_PINS:
        raise BridgeError("GPIO " + str(pin) + " is wired to the SPI flash")
    if output and pin in INPUT_ONLY:
        raise BridgeError("GPIO " + str(pin) + " is input-only")
    return pin


def _hex_arg(args, name):
    text = args.get(name)
    if type(text) is not str or len(text) % 2:
        raise BridgeError("argument '" + name + "' must be an even-length hex string")
    try:
        return bytes(int(text[i : i + 2], 16) for i in range(0, len(text), 2))
    except ValueError:
        raise BridgeError("argument '" + name + "' must be a hex string") from None


def _hex(data):
    return "".join(f"{b:02x}" for b in data)


def boot_event(hal):
    return _line(
        {"event": "boot", "protocol": PROTOCOL, "firmware": FIRMWARE, "reset_cause": hal.reset_cause()}
    )


def _line(obj):
    return (json.dumps(obj) + "\n").encode()


class BridgeHandler:
    """Turns one request line into one reply line, through a HAL (hal_machine or a host-side sim)."""

    def __init__(self, hal):
        self.hal = hal
        self.ops = {
            "hello": self.op_hello,
            "info": self.op_info,
            "gpio.read": self.op_gpio_read,
            "gpio.write": self.op_gpio_write,
            "adc.read": self.op_adc_read,
            "i2c.scan": self.op_i2c_scan,
            "i2c.read": self.op_i2c_read,
            "i2c.write": self.op_i2c_write,
        }

    def handle_line(self, line):
        """bytes in, bytes out (a reply line), or None for a blank line."""
        line = line.strip()
        if not line:
            return None
        if len(line) > MAX_LINE:
            return _line(
                {"id": None, "ok": False, "error": "request longer than " + str(MAX_LINE) + " bytes"}
            )
        try:
            request = json.loads(line)
        except ValueError:
            return _line({"id": None, "ok": False, "error": "request is not valid JSON"})
        if type(request) is not dict:
            return _line({"id": None, "ok": False, "error": "request must be a JSON object"})
        rid = request.get("id")
        if type(rid) is not int:
            return _line({"id": None, "ok": False, "error": "request needs an integer 'id'"})
        op = self.ops.get(request.get("op"))
        if op is None:
            return _line({"id": rid, "ok": False, "error": "unknown op " + repr(request.get("op"))})
        args = request.get("args", {})
        if type(args) is not dict:
            return _line({"id": rid, "ok": False, "error": "'args' must be a JSON object"})
        try:
            result = op(args)
        except BridgeError as e:
            return _line({"id": rid, "ok": False, "error": str(e)})
        except OSError as e:
            # MicroPython's I2C raises OSError(ENODEV / ETIMEDOUT) for a missing device.
            return _line({"id": rid, "ok": False, "error": "bus error: " + str(e)})
        return _line({"id": rid, "ok": True, "result": result})

    def op_hello(self, args):
        return {"protocol": PROTOCOL, "firmware": FIRMWARE, "ops": sorted(self.ops)}

    def op_info(self, args):
        return {
            "firmware": FIRMWARE,
            "protocol": PROTOCOL,
            "chip": self.hal.chip(),
            "cpu_mhz": self.hal.cpu_mhz(),
            "free_memory": self.hal.free_memory(),
            "uptime_ms": self.hal.uptime_ms(),
            "reset_cause": self.hal.reset_cause(),
        }

    def op_gpio_read(self, args):
        pin = _pin(args)
        return {"pin": pin, "value": self.hal.gpio_read(pin)}

    def op_gpio_write(self, args):
        pin = _pin(args, output=True)
        value = _int_arg(args, "value", 0, 1)
        self.hal.gpio_write(pin, value)
        return {"pin": pin, "value": value}

    def op_adc_read(self, args):
        pin = _int_arg(args, "pin", 0, 39)
        if pin not in ADC1_PINS:
            raise BridgeError("GPIO " + str(pin) + " is not an ADC1 pin (32-39)")
        raw, millivolts = self.hal.adc_read(pin)
        return {"pin": pin, "raw": raw, "millivolts": millivolts}

    def op_i2c_scan(self, args):
        bus = _int_arg(args, "bus", 0, 1)
        return {"bus": bus, "addresses": sorted(self.hal.i2c_scan(bus))}

    def op_i2c_read(self, args):
        bus = _int_arg(args, "bus", 0, 1)
        address = _int_arg(args, "address", I2C_FIRST, I2C_LAST)
        register = _int_arg(args, "register", 0, 255)
        length = _int_arg(args, "length", 1, 64)
        return {"data": _hex(self.hal.i2c_read(bus, address, register, length))}

    def op_i2c_write(self, args):
        bus = _int_arg(args, "bus", 0, 1)
        address = _int_arg(args, "address", I2C_FIRST, I2C_LAST)
        register = _int_arg(args, "register", 0, 255)
        data = _hex_arg(args, "data")
        if len(data) > 64:
            raise BridgeError("at most 64 bytes per write")
        self.hal.i2c_write(bus, address, register, data)
        return {"written": len(data)}
