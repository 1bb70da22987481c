"""Growable pools and flow slots: the bounded state of the streaming kernels.

Strategy: the sequential kernels (wireshark.py, segments.py, stalls.py) run
over a capture in chunks of frames and keep their state between chunks in
numpy arrays. Two things grow with the data and are bounded here by what is
live instead of by the capture's length:

- Flows: a flow's state lives in a *slot*, taken at the flow's first packet
  and given back once the capture is past the flow's last frame
  (`flows.last_frame`), so the state arrays hold the flows that are open at
  one time, not every flow of the capture.
- Lists (unacknowledged segments, holes, TSvals...): entries come from a
  pool with a free list; a kernel releases an entry when it is done with it.
  Before each chunk the pool is grown so that every packet of the chunk
  could take one entry, so a kernel never runs out mid-chunk.
"""

import numpy as np

TOP, FREE, NFREE = 0, 1, 2  # pool meta: next never used entry, free list head, free entries


class Pool:
    """Parallel int64 arrays (`fields`, plus the link `next`) with a free list."""

    def __init__(self, fields, capacity=1024):
        self.fields = tuple(fields) + ("next",)
        self.arrays = {f: np.zeros(capacity, np.int64) for f in self.fields}
        self.meta = np.array([0, -1, 0], np.int64)

    @property
    def capacity(self):
        return len(self.arrays["next"])

    def live(self):
        return int(self.meta[TOP] - self.meta[NFREE])

    def ensure(self, room):
        """Make sure `room` more entries can be taken without growing."""
        available = self.capacity - int(self.meta[TOP]) + int(self.meta[NFREE])
        if available >= room:
            return
        size = max(2 * self.capacity, int(self.meta[TOP]) + room)
        for name, arr in self.arrays.items():
            grown = np.zeros(size, np.int64)
            grown[:len(arr)] = arr
            self.arrays[name] = grown

    def args(self):
        """Kernel arguments: meta, then the field arrays, then `next`."""
        return (self.meta, *(self.arrays[f] for f in self.fields))

    def nbytes(self):
        return sum(a.nbytes for a in self.arrays.values())


class FlowSlots:
    """Maps a capture's flow ids to state slots, reusing the slots of ended flows."""

    def __init__(self, flow_last_frame):
        """`flow_last_frame[flow_id]` is the flow's last frame (-1: no such TCP flow)."""
        self.last_frame = np.asarray(flow_last_frame, np.int64)
        self.slot_of = np.full(len(self.last_frame), -1, np.int64)
        self.free = []  # slots given back
        self.size = 0  # slots ever made
        self.active = np.zeros(0, np.int64)  # flow ids holding a slot

    def assign(self, flow_id):
        """(slot per packet, first-packet-of-its-flow flag) for one chunk in frame order."""
        flows, first_index = np.unique(flow_id, return_index=True)
        new = flows[self.slot_of[flows] < 0]
        if len(new):
            reuse = min(len(new), len(self.free))
            slots = np.empty(len(new), np.int64)
            if reuse:
                slots[:reuse] = self.free[-reuse:]
                del self.free[-reuse:]
            slots[reuse:] = np.arange(self.size, self.size + len(new) - reuse)
            self.size += len(new) - reuse
            self.slot_of[new] = slots
            self.active = np.concatenate([self.active, new])
        first = np.zeros(len(flow_id), bool)
        is_new = np.isin(flows, new)
        first[first_index[is_new]] = True
        return self.slot_of[flow_id], first

    def release_through(self, frame):
        """Give back the slots of flows whose last frame is at or before `frame`;
        return those slots (their state is still there until a flow takes them)."""
        done = self.last_frame[self.active] <= frame
        if not done.any():
            return np.zeros(0, np.int64)
        ended = self.active[done]
        slots = self.slot_of[ended].copy()
        self.free.extend(slots.tolist())
        self.slot_of[ended] = -2  # ended: never seen again
        self.active = self.active[~done]
        return slots
