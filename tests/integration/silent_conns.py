"""silent_conns.py PORT FROM N WAIT HOLD: N connections from address FROM to
127.0.0.1:PORT that send nothing; after WAIT seconds prints how many the
server still holds open (a banner or nothing yet: open; EOF or a reset:
closed), then keeps them HOLD seconds more and exits (they close).  For the
gateways' caps on unauthenticated connections per source address (t410,
t710)."""
import socket
import sys
import time

port, src, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
wait, hold = float(sys.argv[4]), float(sys.argv[5])
socks = [socket.create_connection(("127.0.0.1", port), source_address=(src, 0))
         for _ in range(n)]
time.sleep(wait)


def is_open(s):
    s.settimeout(0.05)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except socket.timeout:
        return True
    except OSError:
        return False


print(sum(is_open(s) for s in socks), flush=True)
time.sleep(hold)
