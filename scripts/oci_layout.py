#!/usr/bin/env python3
"""Writes an OCI image layout (image-spec v1.0: oci-layout, index.json, blobs/sha256/) from layer tar files, with no
registry and no container tool: each layer gzipped (deterministically: no name, mtime 0) and stored under the
sha256 of its blob, the config listing the uncompressed tars' digests as rootfs.diff_ids, one manifest, and
index.json naming it with the ref name TAG.  Used by scripts/swe-images.sh (docs/swe.md).

    oci_layout.py --out DIR --tag TAG [--env K=V]... [--workdir DIR] LAYER.tar...
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys


def blob(out, data):
    """Stores data under blobs/sha256/<hex>; its descriptor's digest and size."""
    h = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", h)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return f"sha256:{h}", len(data)


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="")
    ap.add_argument("--created", default="1970-01-01T00:00:00Z")
    ap.add_argument("layers", nargs="+")
    a = ap.parse_args()
    tmp = a.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "blobs", "sha256"))
    layers, diff_ids, history = [], [], []
    for path in a.layers:
        with open(path, "rb") as f:
            raw = f.read()
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        digest, size = blob(tmp, gzip.compress(raw, compresslevel=6, mtime=0))
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": size})
        history.append({"created": a.created, "created_by": f"scripts/oci_layout.py {os.path.basename(path)}"})
    config = {"created": a.created, "architecture": "amd64", "os": "linux",
              "config": {"Env": a.env, **({"WorkingDir": a.workdir} if a.workdir else {})},
              "rootfs": {"type": "layers", "diff_ids": diff_ids}, "history": history}
    cdigest, csize = blob(tmp, canonical(config))
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": csize},
                "layers": layers}
    mdigest, msize = blob(tmp, canonical(manifest))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdigest, "size": msize,
                            "annotations": {"org.opencontainers.image.ref.name": a.tag}}]}
    with open(os.path.join(tmp, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(tmp, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    shutil.rmtree(a.out, ignore_errors=True)  # the layout appears whole or not at all
    os.replace(tmp, a.out)
    print(f"oci_layout.py: {a.out}:{a.tag} {mdigest} ({len(layers)} layers, "
          f"{sum(l['size'] for l in layers) / 1e6:.1f} MB compressed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
