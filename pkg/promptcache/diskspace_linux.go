package promptcache

import "golang.org/x/sys/unix"

// virtualFilesystems are the Linux filesystems whose files are not
// storage, by statfs f_type (linux/magic.h).
var virtualFilesystems = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2fs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpffs",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.NSFS_MAGIC:          "nsfs",
	unix.HUGETLBFS_MAGIC:     "hugetlbfs",
	0x19800202:               "mqueue",   // MQUEUE_MAGIC
	0x62656570:               "configfs", // CONFIGFS_MAGIC
	0x65735543:               "fusectl",  // FUSE_CTL_SUPER_MAGIC
}

// virtualFS names the virtual filesystem holding the existing path p, or
// "" for storage. devtmpfs reports tmpfs's f_type, so /dev is recognised
// by its device number.
func virtualFS(p string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return ""
	}
	if name, ok := virtualFilesystems[int64(st.Type)]; ok {
		return name
	}
	if onDevFS(p) {
		return "devtmpfs (/dev)"
	}
	return ""
}

// onDevFS says p is on the filesystem mounted at /dev (when /dev is a
// mount of its own); /dev/shm, a tmpfs of its own, is not.
func onDevFS(p string) bool {
	var at, dev, root unix.Stat_t
	if unix.Stat(p, &at) != nil || unix.Stat("/dev", &dev) != nil || unix.Stat("/", &root) != nil {
		return false
	}
	return at.Dev == dev.Dev && dev.Dev != root.Dev
}
