# SPDX-License-Identifier: MIT
"""py_lock_transfer — one helper nests two accounts' locks, called from one line.

transfer(src, dst, fee) takes src's lock, then dst's, then (with a fee)
the fee account's: the most common way Python code nests locks of
objects it is given.  The loop in `teller` calls it from one line, so
every call runs on the same native stack: first twice for the same pair
(the second nesting orders nothing new), then with another source and a
fee, whose nesting is new.  An `auditor` takes the fee account's lock and
then the destination's: the opposite order, so heisen predicts a
deadlock between the fee account and the destination, each edge with the
lines that took its locks.  The threads run one after the other: the
program ends.

Usage: py_lock_transfer.py
Prints "pid P", "done 1".
"""
import os
import sys
import threading


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Account:
    def __init__(self):
        self.lock = threading.Lock()
        self.balance = 100


checking = Account()  # marker: checking created
savings = Account()  # marker: savings created
loan = Account()  # marker: loan created
broker = Account()  # marker: broker created


def transfer(src, dst, fee=None):
    with src.lock:
        with dst.lock:  # marker: transfer takes the destination lock
            src.balance -= 1
            dst.balance += 1
            if fee is not None:
                with fee.lock:  # marker: transfer takes the fee lock
                    dst.balance -= 1
                    fee.balance += 1


def teller():
    for src, fee in ((checking, None), (checking, None), (loan, broker)):
        transfer(src, savings, fee)  # marker: teller transfers


def auditor():
    with broker.lock:  # marker: auditor takes the broker lock
        with savings.lock:  # marker: auditor takes the savings lock
            assert broker.balance + savings.balance > 0


say("pid", os.getpid())
for f in (teller, auditor):
    t = threading.Thread(target=f, name=f.__name__)
    t.start()
    t.join()
say("done", 1)
