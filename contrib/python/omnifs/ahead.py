"""Gets fetched ahead, for a caller that polls.

vllm-omni's receive loops poll: one thread asks connector.get() for the
next chunk of every request it waits for, in turn, then sleeps a few
milliseconds (in the connector's wait_for_change() when it has one) and
asks again.  A get that waits for its key there holds up every request
behind it, for as long as the key takes, or for its whole timeout when
the request was aborted and the key never comes.

So such a loop's get answers at once: with the object when its key is
published already (as vllm-omni's own connectors answer: a get of a key
that is there returns it), else with None.  A key that is not here yet
gets a thread of its own that waits for it as every get does, inside
open(), so nothing polls the filesystem; the bytes it reads are held
until the loop asks again, and their arrival ends the loop's wait.  A
fetch waits at most hold_s; the loop's next get of a key still missing
starts another.  What nobody took within hold_s of its coming is dropped
when the next result comes, with a warning (it was consumed: the request
it belonged to is presumably gone).
"""
import logging
import threading
import time

log = logging.getLogger("omnifs.vllm_omni")


class Ahead:
    """Fetches for the keys a polling caller asked for and did not get."""

    def __init__(self, fetch, hold_s, here=None):
        self._fetch = fetch     # fetch(from_stage, to_stage, key): a result, or None
        self._here = here       # the same, at once, if the key is there already; else None
        self._hold_s = hold_s
        self._cv = threading.Condition()
        self._ready = {}        # (from, to, key) -> (result, when it came)
        self._going = {}        # (from, to, key) -> still wanted, while its fetch waits
        self._closed = False
        self.generation = 0     # one more for each result that comes

    def take(self, from_stage, to_stage, key):
        """The result fetched for the key, or the one here() has at once,
        or None after making sure that a fetch for it is on its way."""
        k = (from_stage, to_stage, key)
        with self._cv:
            got = self._ready.pop(k, None)
            if got is not None:
                return got[0]
            if self._closed:
                return None
            if k in self._going:        # on its way (wanted again, if it was given up)
                self._going[k] = True
                return None
            self._going[k] = True       # ours: another take of it waits for this one
        got = self._here(*k) if self._here else None
        with self._cv:     # had now, or closed or given up meanwhile: no fetch
            if got is not None or self._closed or not self._going.get(k):
                self._going.pop(k, None)
                return got
        try:
            threading.Thread(target=self._run, args=k, name="omnifs-ahead", daemon=True).start()
        except RuntimeError as e:       # no thread to be had: the next get tries again
            log.error("OmniFSConnector: get %s/%s/%s: %s", *k, e)
            with self._cv:
                self._going.pop(k, None)
        return None

    def held(self, from_stage, to_stage, key):
        """The result already fetched for the key, or None; never fetches."""
        with self._cv:
            got = self._ready.pop((from_stage, to_stage, key), None)
        return None if got is None else got[0]

    def _run(self, *k):
        got = None
        try:
            got = self._fetch(*k)
        finally:
            self._came(k, got)

    def _came(self, k, got):
        now = time.monotonic()
        with self._cv:
            wanted = self._going.pop(k, False) and not self._closed
            if got is None:
                return
            if not wanted:
                log.info("OmniFSConnector: %s/%s/%s came after it was given up; dropped", *k)
                return
            self._expire(now)
            self._ready[k] = (got, now)
            self.generation += 1
            self._cv.notify_all()

    def _expire(self, now):
        for k in [k for k, (_, when) in self._ready.items() if now - when > self._hold_s]:
            del self._ready[k]
            log.warning("OmniFSConnector: %s/%s/%s was fetched but not taken within %gs; "
                        "dropped", *k, self._hold_s)

    def drop(self, belongs):
        """Gives up the keys for which belongs(key) is true: their results,
        and what their fetches still bring."""
        with self._cv:
            for k in [k for k in self._ready if belongs(k[2])]:
                del self._ready[k]
            for k in self._going:
                if belongs(k[2]):
                    self._going[k] = False

    def wait(self, generation, timeout):
        """True once a result came since generation; False after timeout."""
        with self._cv:
            self._cv.wait_for(lambda: self.generation != generation or self._closed, timeout)
            return self.generation != generation

    def counts(self):
        """(fetches waiting, results held)"""
        with self._cv:
            return sum(self._going.values()), len(self._ready)

    def close(self):
        """Drops what is held, gives up what is coming, ends the waits."""
        with self._cv:
            self._closed = True
            self._ready.clear()
            for k in self._going:
                self._going[k] = False
            self._cv.notify_all()
