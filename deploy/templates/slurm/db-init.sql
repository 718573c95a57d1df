## The database of slurmdbd and its user, idempotently (every start). The
## password, from its root-only file, reaches the mariadb client on stdin,
## never on a command line.
CREATE DATABASE IF NOT EXISTS $db_name;
CREATE USER IF NOT EXISTS '$db_user'@'localhost' IDENTIFIED BY '$password';
ALTER USER '$db_user'@'localhost' IDENTIFIED BY '$password';
GRANT ALL ON $db_name.* TO '$db_user'@'localhost';
