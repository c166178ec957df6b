"""Pulumi components built from the compiled ClusterSpec.

`program.build(effective, root)` is the whole Pulumi program: the `stacks/__main__.py` entry and
`rackform plan` (the same program under Pulumi's mock runtime) both call it. Nothing in this
package calls a cloud API or a host at import time.
"""
