"""
netns.py — network partitions for the chaos soak and the integration tests: one Linux
network namespace per process, each joined by a veth pair to one bridge in the root
namespace, addresses in one private /24 that exists only on that bridge and inside those
namespaces, and cuts made with iptables DROP rules inside the namespaces (never in the
root namespace's tables). Python 3 stdlib only; every `ip` / `iptables` call has a timeout.

    from netns import Net
    if Net.available():
        net = Net(["cfg", "s0", "s1", "r0"])
        argv = net.wrap("s0", ["bin/shardd", "--bind", net.addr("s0"), ...])
        p = subprocess.Popen(argv)   # p.pid is shardd's own pid: `ip netns exec` execs
        net.cut("s0", "s1")          # both ways
        net.cut("s0", "s1", both=False)   # only packets from s0 to s1 are lost
        net.heal("s0", "s1"); net.heal_all()
        net.close()                  # every namespace, veth, bridge and rule; idempotent

What one run creates (RUN = "msnet" + 4 random hex digits, e.g. msnet3fa9):
  - namespaces RUN-NAME (one per name; NAME is what the caller passed);
  - a bridge RUN + "b" in the root namespace, with address 10.231.X.1/24 (X random among
    the /24s no address or route of the root namespace touches), so a driver running in
    the root namespace reaches every process;
  - per namespace a veth pair: RUN + "v" + i on the bridge, its peer renamed eth0 inside
    the namespace, address 10.231.X.(i + 2)/24, default route via .1; lo up;
  - a state file /run/msnetns/RUN holding the owner's pid and start time, so that
    cleanup_stale() can tell a live parallel run (left alone) from a killed one (removed).
Link names stay within Linux's 15 characters (RUN is 9, the bridge 10, a veth at most 13).

Cuts. iptables rules live in the namespaces' own tables (each namespace has its own
netfilter state), so deleting a namespace deletes its rules; the root namespace's tables
are never touched.
  - cut(a, b) (both ways): a's INPUT drops packets from b and b's INPUT drops packets
    from a. Rules go on INPUT only: a locally made packet dropped in OUTPUT fails its
    send with EPERM at once, which is not what a partition looks like. With INPUT drops
    every packet leaves its sender and vanishes on the wire; senders see only timeouts.
  - cut(a, b, both=False) (one way): b's INPUT drops packets from a; b's packets still
    reach a. For TCP this is almost a full cut: a new connection either way fails (a's
    SYN, or a's SYN-ACK to b's SYN, is lost), and on an established connection a's data
    and a's ACKs are lost, so b retransmits too. What differs: a request b sends on an
    already established connection DOES reach a and runs there, while its reply never
    comes back — the "did it happen?" case a both-ways cut cannot produce.
A cut does not reset anything: established TCP connections stay, unacknowledged data is
retransmitted with exponential backoff and delivered once the cut heals, if the sender
has not given up (Linux: tcp_retries2 ~ 15 min; a socket closed by its owner still
retransmits its queued data for tcp_orphan_retries). That late delivery is what a
partition that heals after a deadline adds to what kill -9 can show.

Caveat: with br_netfilter loaded and bridge-nf-call-iptables=1, bridged packets between
namespaces also pass the root namespace's FORWARD chain; a DROP policy there (Docker
sets one) would cut every namespace from every other. available() does not change it
(we never write root tables); it reports False, saying why, when that policy is DROP.

Cleanup after a killed run: `python3 tests/chaos/netns.py --cleanup` (cleanup_stale
("msnet")) removes every namespace, link and state file of runs whose owner is dead.
Python 3 stdlib only; run as root.
"""
import atexit
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import sys
import threading

PREFIX = "msnet"                 # every run's names start with this
STATE_DIR = "/run/msnetns"
CALL_TIMEOUT_S = 10              # bound of one ip / iptables call
_SUBNET_FIRST = 10               # the /24 is 10.231.X.0/24, X in [10, 250)
_SUBNET_LAST = 250

_live = []                       # every open Net, closed at exit or on SIGTERM
_live_mu = threading.RLock()   # re-entrant: the SIGTERM handler may run while it is held


class NetError(RuntimeError):
    pass


def _run(argv, check=True, timeout=CALL_TIMEOUT_S):
    """Runs one command, bounded; returns (returncode, stdout, stderr)."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NetError("%s timed out after %ds" % (" ".join(argv), timeout))
    except OSError as e:
        raise NetError("%s: %s" % (" ".join(argv), e))
    if check and p.returncode != 0:
        raise NetError("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p.returncode, p.stdout, p.stderr


def _proc_start_time(pid):
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return int(s[s.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _netns_list():
    rc, out, _ = _run(["ip", "netns", "list"], check=False)
    return [ln.split()[0] for ln in out.splitlines() if ln.strip()] if rc == 0 else []


def _link_list():
    rc, out, _ = _run(["ip", "-o", "link", "show"], check=False)
    names = []
    for ln in out.splitlines() if rc == 0 else []:
        parts = ln.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _run_of(name):
    """The run id (PREFIX + 4 hex) a namespace or link name belongs to, or None."""
    if not name.startswith(PREFIX) or len(name) < len(PREFIX) + 4:
        return None
    rid = name[:len(PREFIX) + 4]
    try:
        int(rid[len(PREFIX):], 16)
    except ValueError:
        return None
    return rid


def _run_alive(rid):
    """True when the process that created run rid still runs (pid and start time match)."""
    try:
        with open(os.path.join(STATE_DIR, rid)) as f:
            pid, start = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return False
    return _proc_start_time(pid) == start


def _remove_run(rid):
    """Removes every namespace and link of run rid, and its state file. Deleting a
    namespace deletes its veth end (so the pair), its iptables rules and its addresses."""
    errors = []
    for ns in _netns_list():
        if ns.startswith(rid + "-"):
            rc, _, err = _run(["ip", "netns", "delete", ns], check=False)
            if rc != 0 and ns in _netns_list():
                errors.append("netns %s: %s" % (ns, err.strip()))
    for link in _link_list():
        if link.startswith(rid):
            rc, _, err = _run(["ip", "link", "delete", link], check=False)
            if rc != 0 and link in _link_list():
                errors.append("link %s: %s" % (link, err.strip()))
    try:
        os.unlink(os.path.join(STATE_DIR, rid))
    except OSError:
        pass
    return errors


def cleanup_stale(prefix=PREFIX):
    """Removes what earlier runs whose names start with `prefix` left behind (a run
    killed with -9 could not close), leaving alone runs whose owner still lives.
    Returns the run ids removed."""
    if not prefix.startswith(PREFIX):
        raise ValueError("prefix must start with %r" % PREFIX)
    runs = set()
    for name in _netns_list() + _link_list():
        rid = _run_of(name)
        if rid and rid.startswith(prefix[:len(rid)]) and name.startswith(prefix[:len(name)]):
            runs.add(rid)
    try:
        for f in os.listdir(STATE_DIR):
            if _run_of(f) == f and f.startswith(prefix[:len(f)]):
                runs.add(f)
    except OSError:
        pass
    removed = []
    for rid in sorted(runs):
        if _run_alive(rid):
            continue
        errs = _remove_run(rid)
        if errs:
            raise NetError("cleanup of %s left: %s" % (rid, "; ".join(errs)))
        removed.append(rid)
    return removed


def _used_subnets():
    """The X of every 10.231.X.0/24 that an address or a route of the root namespace
    (any table) falls in or covers. A route wider than the /16 (a 10.0.0.0/8 via some
    gateway, a default route) does not count: our connected /24 is more specific and
    wins for the driver, and nothing else on the host uses those addresses."""
    used = set()
    base = ipaddress.ip_network("10.231.0.0/16")
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        rc, out, _ = _run(argv, check=False)
        for tok in (out if rc == 0 else "").split():
            try:
                n = ipaddress.ip_network(tok, strict=False)   # "10.231.5.7", "10.231.4.0/22"
            except ValueError:
                continue
            if n.prefixlen >= 16 and n.overlaps(base):
                first = int(n.network_address) >> 8 & 0xFF
                last = int(n.broadcast_address) >> 8 & 0xFF
                used.update(range(first, last + 1))
    return used


class Net:
    """One partitionable network: a namespace per name on one bridge. See the module text."""

    @staticmethod
    def available(why=None):
        """True when this process may build one: root, `ip` and `iptables` found, a probe
        namespace can be made, iptables works inside it, and it is removed again. `why`,
        a list, receives the reason when False."""
        def no(reason):
            if why is not None:
                why.append(reason)
            return False
        if os.geteuid() != 0:
            return no("not root")
        for tool in ("ip", "iptables"):
            if not shutil.which(tool):
                return no("%s not found" % tool)
        try:
            rc, out, _ = _run(["iptables", "-S", "FORWARD"], check=False)
            if rc == 0 and "-P FORWARD DROP" in out and _bridge_nf_on():
                return no("the root namespace's FORWARD policy is DROP and bridged packets pass "
                          "it (bridge-nf-call-iptables=1): namespaces could not reach each other")
            probe = "%s%04x-probe" % (PREFIX, random.randrange(0x10000))
            rc, _, err = _run(["ip", "netns", "add", probe], check=False)
            if rc != 0:
                return no("ip netns add: %s" % err.strip())
            try:
                rc, _, err = _run(["ip", "netns", "exec", probe, "iptables", "-S", "INPUT"], check=False)
                if rc != 0:
                    return no("iptables inside a namespace: %s" % err.strip())
            finally:
                _run(["ip", "netns", "delete", probe], check=False)
            if probe in _netns_list():
                return no("the probe namespace %s could not be removed" % probe)
        except NetError as e:
            return no(str(e))
        return True

    def __init__(self, names):
        names = list(names)
        if not names or len(set(names)) != len(names):
            raise ValueError("names must be distinct and not empty")
        if len(names) > 250:
            raise ValueError("at most 250 namespaces in one /24")
        for n in names:
            if not n or "/" in n or len(n) > 40 or not all(ch.isalnum() or ch in "-_." for ch in n):
                raise ValueError("bad namespace name %r" % n)
        self.names = names
        self.closed = False
        self._cuts = set()                   # (a, b, both) currently in place
        self._mu = threading.Lock()
        taken = set(r for r in (_run_of(x) for x in _netns_list() + _link_list()) if r)
        for _ in range(100):
            rid = "%s%04x" % (PREFIX, random.randrange(0x10000))
            if rid not in taken and not os.path.exists(os.path.join(STATE_DIR, rid)):
                break
        else:
            raise NetError("no free run id")
        self.run = rid
        self.bridge = rid + "b"
        used = _used_subnets()
        free = [x for x in range(_SUBNET_FIRST, _SUBNET_LAST) if x not in used]
        if not free:
            raise NetError("no free /24 in 10.231.0.0/16")
        self.x = random.choice(free)
        self.subnet = "10.231.%d.0/24" % self.x
        self.gateway = "10.231.%d.1" % self.x
        self._addr = {n: "10.231.%d.%d" % (self.x, i + 2) for i, n in enumerate(names)}
        self._ns = {n: "%s-%s" % (rid, n) for n in names}
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(os.path.join(STATE_DIR, rid), "w") as f:
            f.write("%d %d\n" % (os.getpid(), _proc_start_time(os.getpid())))
        with _live_mu:
            _live.append(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self):
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", self.gateway + "/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, n in enumerate(self.names):
            ns, host, peer = self._ns[n], "%sv%d" % (self.run, i), "%sp%d" % (self.run, i)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", host, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", host, "master", self.bridge])
            _run(["ip", "link", "set", host, "up"])
            _run(["ip", "link", "set", peer, "netns", ns])
            ex = ["ip", "netns", "exec", ns]
            _run(ex + ["ip", "link", "set", peer, "name", "eth0"])
            _run(ex + ["ip", "addr", "add", self._addr[n] + "/24", "dev", "eth0"])
            _run(ex + ["ip", "link", "set", "eth0", "up"])
            _run(ex + ["ip", "link", "set", "lo", "up"])
            _run(ex + ["ip", "route", "add", "default", "via", self.gateway])

    # ---- addresses and commands ------------------------------------------------------

    def _check(self, name):
        if self.closed:
            raise NetError("this Net is closed")
        if name not in self._ns:
            raise KeyError("no namespace named %r" % name)

    def addr(self, name):
        """The IPv4 address of name's namespace (on its eth0)."""
        self._check(name)
        return self._addr[name]

    def netns(self, name):
        """The namespace's real name (for `ip netns exec` by hand)."""
        self._check(name)
        return self._ns[name]

    def wrap(self, name, argv):
        """argv run inside name's namespace. `ip netns exec` enters the namespace and
        execs argv in its own process, so the pid Popen reports is argv's own."""
        self._check(name)
        return ["ip", "netns", "exec", self._ns[name]] + list(argv)

    # ---- cuts --------------------------------------------------------------------------

    def _rules(self, a, b, both):
        """The (namespace, rule) pairs of a cut: INPUT drops only (see the module text)."""
        rules = [(self._ns[b], ["INPUT", "-s", self._addr[a], "-j", "DROP"])]
        if both:
            rules.append((self._ns[a], ["INPUT", "-s", self._addr[b], "-j", "DROP"]))
        return rules

    def _ipt(self, ns, op, rule, check=True):
        return _run(["ip", "netns", "exec", ns, "iptables", "-w", "5", op] + rule, check=check)

    def cut(self, a, b, both=True):
        """Cuts a from b: both ways, or (both=False) only packets from a to b."""
        self._check(a)
        self._check(b)
        if a == b:
            raise ValueError("a process cannot be cut from itself")
        with self._mu:
            if (a, b, both) in self._cuts:
                return
            for ns, rule in self._rules(a, b, both):
                self._ipt(ns, "-A", rule)
            self._cuts.add((a, b, both))

    def heal(self, a, b):
        """Removes every cut between a and b (either direction, one way or both)."""
        self._check(a)
        self._check(b)
        with self._mu:
            for cut in [c for c in self._cuts if {c[0], c[1]} == {a, b}]:
                self._uncut(cut)

    def heal_all(self):
        with self._mu:
            for cut in list(self._cuts):
                self._uncut(cut)

    def _uncut(self, cut):
        a, b, both = cut
        for ns, rule in self._rules(a, b, both):
            # -D deletes one copy; a rule shared with another cut (cut(a,b) and
            # cut(a,b,both=False) both drop a->b at b) was added once per cut.
            self._ipt(ns, "-D", rule)
        self._cuts.discard(cut)

    def cuts(self):
        """The cuts in place, as (a, b, both) tuples."""
        with self._mu:
            return sorted(self._cuts)

    def rules(self, name):
        """name's iptables rules as `iptables -S` prints them (for tests and logs)."""
        self._check(name)
        return self._ipt(self._ns[name], "-S", [])[1]

    # ---- teardown ---------------------------------------------------------------------

    def close(self):
        """Removes every namespace, veth, the bridge and the rules. Idempotent; raises
        NetError if something could not be removed (after trying everything)."""
        with _live_mu:
            if self in _live:
                _live.remove(self)
        if self.closed:
            return
        self.closed = True
        self._cuts.clear()
        errs = _remove_run(self.run)
        if errs:
            raise NetError("close of %s left: %s" % (self.run, "; ".join(errs)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _bridge_nf_on():
    try:
        with open("/proc/sys/net/bridge/bridge-nf-call-iptables") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def close_all():
    """Closes every open Net (what atexit and the SIGTERM handler call). A driver that
    installs its own SIGTERM handler after importing this module should call it, or
    leave through sys.exit so that atexit does."""
    with _live_mu:
        nets = list(_live)
    for n in nets:
        try:
            n.close()
        except Exception as e:   # at exit: report, keep closing the others
            sys.stderr.write("netns: %s\n" % e)


atexit.register(close_all)


def _install_sigterm():
    """On SIGTERM: close every Net, then run the handler that was there (exit 143 if it
    was the default; stay if SIGTERM was ignored)."""
    prev = signal.getsignal(signal.SIGTERM)

    def on_term(sig, frame):
        close_all()
        if callable(prev):
            prev(sig, frame)
        elif prev != signal.SIG_IGN:
            sys.exit(128 + sig)
    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:
        pass   # not the main thread: atexit still closes


_install_sigterm()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cleanup"]:
        prefix = sys.argv[2] if len(sys.argv) > 2 else PREFIX
        print("removed: %s" % (" ".join(cleanup_stale(prefix)) or "nothing"))
    elif sys.argv[1:2] == ["--available"]:
        why = []
        ok = Net.available(why)
        print("available" if ok else "not available: %s" % why[0])
        sys.exit(0 if ok else 1)
    else:
        sys.stderr.write("usage: netns.py --cleanup [PREFIX] | --available\n")
        sys.exit(2)
