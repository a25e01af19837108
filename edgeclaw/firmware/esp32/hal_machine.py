# The bridge's hardware layer on a real ESP32, through MicroPython's `machine` module.
# (Not importable under CPython: it is copied to the board with protocol.py and main.py.)

import gc
import time

import machine

I2C_PINS = {0: (22, 21), 1: (26, 25)}  # bus: (SCL, SDA) — the DevKitC's usual wiring
I2C_FREQ = 100_000
RESET_CAUSES = {
    machine.PWRON_RESET: "power-on",
    machine.HARD_RESET: "hard reset",
    machine.WDT_RESET: "watchdog",
    machine.DEEPSLEEP_RESET: "deep sleep",
    machine.SOFT_RESET: "soft reset",
}


class MachineHal:
    def __init__(self):
        self._pins = {}
        self._adcs = {}
        self._i2c = {}
        self._started = time.ticks_ms()

    def chip(self):
        return "ESP32"

    def cpu_mhz(self):
        return machine.freq() // 1_000_000

    def free_memory(self):
        gc.collect()
        return gc.mem_free()

    def uptime_ms(self):
        return time.ticks_diff(time.ticks_ms(), self._started)

    def reset_cause(self):
        return RESET_CAUSES.get(machine.reset_cause(), "unknown")

    def gpio_read(self, pin):
        p = self._pins.get(pin)
        if p is None:
            p = machine.Pin(pin, machine.Pin.IN)
            self._pins[pin] = p
        return p.value()

    def gpio_write(self, pin, value):
        p = machine.Pin(pin, machine.Pin.OUT)
        self._pins[pin] = p
        p.value(value)

    def adc_read(self, pin):
        adc = self._adcs.get(pin)
        if adc is None:
            adc = machine.ADC(machine.Pin(pin))
            adc.atten(machine.ADC.ATTN_11DB)  # full 0-3.3 V range
            self._adcs[pin] = adc
        raw = adc.read()
        return raw, adc.read_uv() // 1000

    def _bus(self, bus):
        i2c = self._i2c.get(bus)
        if i2c is None:
            scl, sda = I2C_PINS[bus]
            i2c = machine.I2C(bus, scl=machine.Pin(scl), sda=machine.Pin(sda), freq=I2C_FREQ)
            self._i2c[bus] = i2c
        return i2c

    def i2c_scan(self, bus):
        return self._bus(bus).scan()

    def i2c_read(self, bus, address, register, length):
        return self._bus(bus).readfrom_mem(address, register, length)

    def i2c_write(self, bus, address, register, data):
        self._bus(bus).writeto_mem(address, register, data)
