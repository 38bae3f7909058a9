# SPDX-License-Identifier: MIT
"""Spack recipe of stagehand: `spack repo add contrib/spack`, then, in a
Spack environment, `spack develop --path /path/to/stagehand stagehand@0.1.0`
and `spack install` (or point `git` below at the site's mirror)."""

from spack.package import *


class Stagehand(MesonPackage):
    """Checkpoint staging for HPC and ML jobs: a preloaded shim captures the
    writes to the paths a policy names, deduplicates and compresses them into
    the node's local cache, and a flusher ships them to staging servers over
    TCP or RDMA, from which any version restores byte for byte."""

    homepage = "https://stagehand.invalid/"
    git = "https://stagehand.invalid/stagehand.git"
    maintainers = []

    license("MIT")

    version("main", branch="main")
    version("0.1.0")

    variant("rdma", default=True, description="RDMA transport (libibverbs, librdmacm)")
    variant("slurm", default=True, description="Slurm SPANK plugin (srun --stagehand)")
    variant("man", default=True, description="Man pages, made from --help")

    depends_on("meson@1.0:", type="build")
    depends_on("ninja", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("help2man", type="build", when="+man")

    depends_on("xxhash")
    depends_on("lz4")
    depends_on("zstd")
    depends_on("liburing")
    depends_on("jemalloc")
    depends_on("inih")
    depends_on("openssl")
    depends_on("munge")
    depends_on("rdma-core", when="+rdma")
    depends_on("slurm", when="+slurm")

    def meson_args(self):
        spec = self.spec

        def feature(name):
            return "-D{0}={1}".format(name, "enabled" if "+" + name in spec else "disabled")

        args = ["-Dtests=false", "-Dbats=disabled",
                feature("rdma"), feature("slurm"), feature("man"),
                # inside the prefix: Slurm's PlugStackConfig names it there
                "-Dslurm_plugindir=" + join_path(self.prefix.lib, "slurm"),
                "-Dsystemdunitdir=" + join_path(self.prefix.lib, "systemd", "system")]
        return args
