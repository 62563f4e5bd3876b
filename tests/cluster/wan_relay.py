"""The delay between the two sites of netns_sites.py: this kernel has no netem qdisc, so packets
crossing between sites are routed into a TUN device (policy routing in the wan namespace), held
here for the one-way delay, and written back to the kernel, which routes them on to the other
site. Packets keep their order (one constant delay). Runs inside the wan namespace until killed.

Usage: wan_relay.py TUN_NAME DELAY_MS"""
import collections
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def main():
    name, delay = sys.argv[1], float(sys.argv[2]) / 1000.0
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    print("ready", flush=True)  # attached: netns_sites.py waits for this line
    held = collections.deque()  # (due, packet), due ascending
    while True:
        now = time.monotonic()
        while held and held[0][0] <= now:
            try:
                os.write(fd, held.popleft()[1])
            except OSError as e:  # one packet refused (as a lossy link would drop it): TCP resends
                print(f"wan_relay: dropped a packet: {e}", file=sys.stderr, flush=True)
        timeout = max(0.0, held[0][0] - now) if held else 1.0
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            continue
        arrived = time.monotonic()
        for _ in range(256):  # drain what is queued, then send what is due
            try:
                held.append((arrived + delay, os.read(fd, 65536)))
            except BlockingIOError:
                break


if __name__ == "__main__":
    main()
