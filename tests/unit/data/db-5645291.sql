-- A database made by berth-hostd as of commit 5645291 (before schema
-- versions): built from that commit, started on a temporary state directory
-- against libvirtd, then `berth image build tiny`, `berth create x
-- --no-start`, `berth checkpoint x first`, `berth key add`, `berth token
-- create --name old-token`; hostd stopped; `sqlite3 berth.db .dump`.
-- tests/unit/test_db.c opens it with today's db_open.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE meta(  key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES('instance','bdca183b');
INSERT INTO meta VALUES('qemu_index_next','2');
INSERT INTO meta VALUES('alive','0');
CREATE TABLE images(  name TEXT PRIMARY KEY, volume TEXT NOT NULL, format TEXT NOT NULL,  boot TEXT NOT NULL, kernel TEXT NOT NULL, initrd TEXT NOT NULL,  cmdline TEXT NOT NULL, user TEXT NOT NULL, virtual_size INTEGER NOT NULL,  sha256 TEXT NOT NULL, created INTEGER NOT NULL,  source TEXT NOT NULL DEFAULT '', source_size INTEGER NOT NULL DEFAULT 0);
INSERT INTO images VALUES('tiny','base-tiny','qcow2','direct','/tmp/berth-t.IgdJtf/state/images/tiny/vmlinuz','/tmp/berth-t.IgdJtf/state/images/tiny/initrd.img','console=tty1 console=ttyS0 root=/dev/vda rw quiet','root',268435456,'075b1c439c03b69ea36a8113318e2ccc8eeb17c465629ce017108a1023f3ec90',1796186339,'qcow2',16056320);
CREATE TABLE machines(  id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,  image TEXT NOT NULL, vcpus INTEGER NOT NULL, memory INTEGER NOT NULL,  disk INTEGER NOT NULL, state TEXT NOT NULL, volume TEXT NOT NULL,  mac TEXT NOT NULL, ssh_port INTEGER NOT NULL, created INTEGER NOT NULL,  state_since INTEGER NOT NULL, idle_timeout INTEGER NOT NULL DEFAULT 0, host_key TEXT NOT NULL DEFAULT '', host_key_state TEXT NOT NULL DEFAULT 'none', host_key_next TEXT NOT NULL DEFAULT '', net_index INTEGER NOT NULL DEFAULT 0, net_alias TEXT NOT NULL DEFAULT '', egress TEXT NOT NULL DEFAULT '', qemu_index INTEGER NOT NULL DEFAULT 0, UNIQUE(owner, name));
INSERT INTO machines VALUES('e92cd413-db27-4e12-ac68-5f2463587bf0','root','x','tiny',1,536870912,268435456,'stopped','m-e92cd413-db27-4e12-ac68-5f2463587bf0-87d01fb3','52:54:00:e4:43:41',0,1796186339,1796186339,0,'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBwWlM5F03eY0a92HLA1WNZKiLPMwxgh+/IFWnqpbJ+s','seed','',1,'','',1);
CREATE TABLE ledger(  id INTEGER PRIMARY KEY, machine_id TEXT NOT NULL, owner TEXT NOT NULL,  name TEXT NOT NULL, state TEXT NOT NULL, vcpus INTEGER NOT NULL,  memory INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER);
INSERT INTO ledger VALUES(1,'e92cd413-db27-4e12-ac68-5f2463587bf0','root','x','creating',1,536870912,1796186339,1796186339);
INSERT INTO ledger VALUES(2,'e92cd413-db27-4e12-ac68-5f2463587bf0','root','x','stopped',1,536870912,1796186339,NULL);
CREATE TABLE checkpoints(  machine_id TEXT NOT NULL, name TEXT NOT NULL, volume TEXT NOT NULL,  created INTEGER NOT NULL, memory TEXT NOT NULL DEFAULT '',  PRIMARY KEY(machine_id, name));
INSERT INTO checkpoints VALUES('e92cd413-db27-4e12-ac68-5f2463587bf0','first','m-e92cd413-db27-4e12-ac68-5f2463587bf0',1796186339,'');
CREATE TABLE keys(  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, type TEXT NOT NULL,  blob TEXT NOT NULL, comment TEXT NOT NULL, fingerprint TEXT NOT NULL,  created INTEGER NOT NULL, UNIQUE(type, blob));
INSERT INTO keys VALUES(1,'root','ssh-ed25519','AAAAC3NzaC1lZDI1NTE5AAAAIPPMnm1vfz6moZpycy+uJGq4bKz8KXK7r+WA98gfQPx9','old-key','SHA256:7tTiVSe+RmKoN6od0bhDHkBPdqWDEx39Sl+SG4OhK8s',1796186339);
CREATE TABLE prices(  from_t INTEGER PRIMARY KEY, vcpu_hour INTEGER NOT NULL,  memory_gib_hour INTEGER NOT NULL, storage_gib_month INTEGER NOT NULL,  currency TEXT NOT NULL);
INSERT INTO prices VALUES(0,20000000,5000000,100000000,'USD');
CREATE TABLE storage_samples(  machine_id TEXT NOT NULL, t INTEGER NOT NULL, bytes INTEGER NOT NULL,  PRIMARY KEY(machine_id, t));
INSERT INTO storage_samples VALUES('e92cd413-db27-4e12-ac68-5f2463587bf0',1796186339,200704);
CREATE TABLE tokens(  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,  hash TEXT NOT NULL UNIQUE, created INTEGER NOT NULL,  last_used INTEGER NOT NULL DEFAULT 0);
INSERT INTO tokens VALUES(1,'root','old-token','7a3a6a8a5c437250df16ddc20047dd9605bfe578cee884efc6b596e7dff13a90',1796186339,0);
CREATE INDEX ledger_machine ON ledger(machine_id, end);
CREATE INDEX keys_owner ON keys(owner, id);
CREATE INDEX tokens_owner ON tokens(owner, id);
COMMIT;
