"""The lab: real kernel TCP over an emulated wide-area path (needs root).

`wan.EmulatedPath` joins two network namespaces through TUN devices and
forwards packets between them in user space with a per-direction one-way
delay, seeded random loss and an optional bottleneck rate with a tail-drop
queue, logging every packet it drops.
"""
