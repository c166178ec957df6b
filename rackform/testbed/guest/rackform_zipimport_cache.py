"""rackform testbed only: a bytecode cache for Python modules imported from zip archives.

CPython compiles a module it imports from a zip archive from source every time: zipimport
never writes bytecode (and 3.11's compiles each module twice per import, once when the import
system asks for its file name and once for its code). Every Ansible task runs its module from
such an archive (AnsiballZ), so on the testbed's emulated CPUs each task spent one to two
seconds compiling the same ansible.module_utils source the previous task had compiled. This
keeps what compile() returned under /var/cache/rackform-zipimport, keyed by a hash of the source
and of the interpreter's bytecode version and optimization level, and gives the cached code the
file name it is imported from now. The code that runs is the code compile() gives; nothing else
about imports changes.

Installed in the testbed image with a .pth file, so every python3 on the VM loads it. It is not
part of what rackform installs on real hosts.
"""

import sys
import zipimport

CACHE_DIR = "/var/cache/rackform-zipimport"
_compile_source = zipimport._compile_source


def _cached_compile_source(pathname, source):
    import _imp
    import hashlib
    import marshal
    import os
    from _frozen_importlib_external import MAGIC_NUMBER

    salt = MAGIC_NUMBER + b"O%d:" % sys.flags.optimize
    path = os.path.join(CACHE_DIR, hashlib.sha256(salt + source).hexdigest())
    try:
        with open(path, "rb") as f:
            code = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile_source(pathname, source)
        try:
            os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(marshal.dumps(code))
            os.replace(tmp, path)
        except OSError:
            pass  # no cache (read-only, not root): compiled as before
        return code
    _imp._fix_co_filename(code, pathname)
    return code


zipimport._compile_source = _cached_compile_source
