module tphdb/pogreb-driver

go 1.21

require github.com/akrylysov/pogreb v0.10.2
