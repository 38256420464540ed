import json
import sys

print(json.dumps({"argv": sys.argv, "name": __name__, "path0": sys.path[0], "file": __file__}))
