"""The serial console for field technicians: a terminal on a UART, USB gadget serial or USB-serial port.

One concept per module: `port` opens and reopens the serial port (pyserial,
imported only when a port is opened), `editor` turns keystrokes into lines,
`render` turns replies into terminal lines, `login` is the PIN gate,
`session` is one technician's session on one port, and `channel` is the
service that runs a session per configured port and answers approvals.
"""
