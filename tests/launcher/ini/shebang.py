#!/usr/bin/python3.11 -u
# The launcher runs a .py program with the interpreter its #! line names (golden py_shebang).
