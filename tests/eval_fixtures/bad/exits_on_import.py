import sys

sys.exit("refusing to run")
