#!/bin/bash
# server -- router (tbf towards the client) -- client; curl fetches a file N times; tcpdump at the client.
# RATE (tbf rate), LIMIT (queue bytes), SIZE (bytes), N (fetches), CC (the sender's congestion control),
# UP=1: the client uploads SIZE bytes (curl POST to up.py) through a bucket towards the server
set -e
RATE=${RATE:-20mbit}; LIMIT=${LIMIT:-100000}; SIZE=${SIZE:-2000000}; N=${N:-2}; CC=${CC:-cubic}
C=tkr-c; R=tkr-r; S=tkr-s
cleanup() { for p in $(cat pids 2>/dev/null); do kill $p 2>/dev/null || true; done; rm -f pids; for n in $C $R $S; do ip netns del $n 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup
for n in $C $R $S; do ip netns add $n; ip -n $n link set lo up; done
ip link add tkr-sa type veth peer name tkr-sb; ip link set tkr-sa netns $S; ip link set tkr-sb netns $R
ip link add tkr-ca type veth peer name tkr-cb; ip link set tkr-ca netns $C; ip link set tkr-cb netns $R
ip -n $S addr add 198.18.53.2/24 dev tkr-sa; ip -n $R addr add 198.18.53.1/24 dev tkr-sb
ip -n $C addr add 198.18.54.2/24 dev tkr-ca; ip -n $R addr add 198.18.54.1/24 dev tkr-cb
for x in "$S tkr-sa" "$R tkr-sb" "$R tkr-cb" "$C tkr-ca"; do set -- $x; ip -n $1 link set $2 up; ip netns exec $1 ethtool -K $2 tso off gso off gro off >/dev/null; done
ip -n $S route add default via 198.18.53.1; ip -n $C route add default via 198.18.54.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $S sysctl -qw net.ipv4.tcp_congestion_control=$CC
ip netns exec $C sysctl -qw net.ipv4.tcp_congestion_control=$CC
SHAPED=$([ -n "$UP" ] && echo tkr-sb || echo tkr-cb)
ip netns exec $R tc qdisc add dev $SHAPED root tbf rate $RATE burst 15000 limit $LIMIT
mkdir -p www; head -c $SIZE /dev/urandom > www/f
if [ -n "$UP" ]; then ip netns exec $S python3 up.py 198.18.53.2 8080 >/dev/null 2>&1 & echo $! >> pids
else ip netns exec $S python3 -m http.server 8080 --bind 198.18.53.2 --directory www >/dev/null 2>&1 & echo $! >> pids; fi
sleep 1
ip netns exec $C tcpdump -i tkr-ca -s 128 -w client.pcap -U 2>/dev/null & echo $! >> pids
sleep 1
for i in $(seq $N); do if [ -n "$UP" ]; then ip netns exec $C curl -s -o /dev/null -w '%{time_total}\n' --data-binary @www/f -H 'Expect:' http://198.18.53.2:8080/up
  else ip netns exec $C curl -s -o /dev/null -w '%{time_total}\n' http://198.18.53.2:8080/f; fi; done | tee curl.txt
sleep 1
ip netns exec $R tc -s qdisc show dev $SHAPED | tee tc.txt
