#!/bin/sh
echo "coverage is not supported in the offline ferry build" >&2
exit 1
