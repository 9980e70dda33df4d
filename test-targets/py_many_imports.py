# SPDX-License-Identifier: MIT
"""py_many_imports — two threads import a few dozen standard-library modules.

Every import makes a module lock (importlib's _ModuleLock, a
threading.Lock-like semaphore) at one line of importlib, reached through
as many import chains as there are modules, and nested imports take them
inside each other: the start-up of any real Python service.  A module
missing from this interpreter's build is skipped.

Prints "pid P", "modules N" (in sys.modules at the end), "done 1".
"""
import os
import sys
import threading

MODULES = ["json", "email.mime.text", "email.mime.multipart", "http.client", "http.server", "xml.dom.minidom",
           "xml.etree.ElementTree", "asyncio", "unittest", "argparse", "logging.handlers", "concurrent.futures",
           "multiprocessing.pool", "sqlite3", "decimal", "fractions", "statistics", "urllib.request", "csv",
           "tarfile", "zipfile", "smtplib", "imaplib", "ftplib", "pdb", "pydoc", "difflib", "inspect", "ast",
           "dataclasses", "typing", "uuid", "secrets", "hashlib", "ssl", "socketserver", "wsgiref.simple_server",
           "xmlrpc.client", "xmlrpc.server", "mailbox", "calendar", "configparser", "shelve", "dbm", "gzip",
           "bz2", "lzma"]


def load(names):
    for name in names:
        try:
            __import__(name)
        except ImportError:
            pass  # not built into this interpreter


print("pid", os.getpid(), flush=True)
threads = [threading.Thread(target=load, args=(MODULES[i::2],)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("modules", len(sys.modules), flush=True)
print("done 1", flush=True)
