#!/bin/sh
# A host discovery script for the golden cases: two hosts, one with its slot count.
echo a:2
echo b
