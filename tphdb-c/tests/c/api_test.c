/* The C API end to end: open, put/get/delete, batches, iterators, errors,
 * checkpoint, reopen. Exits non-zero with a message on the first failure.
 * Run under valgrind (or ASan) by tphdb-c/tests/c_api.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tphdb.h"

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#define CHECK_OK(err)                                                      \
    do {                                                                   \
        if (err) {                                                         \
            fprintf(stderr, "%s:%d: error: %s\n", __FILE__, __LINE__, err); \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static void check_value(tphdb_t *db, const char *key, const char *want) {
    char *err = NULL;
    size_t len = 0;
    char *v = tphdb_get(db, key, strlen(key), &len, &err);
    CHECK_OK(err);
    if (want == NULL) {
        CHECK(v == NULL);
        return;
    }
    CHECK(v != NULL);
    CHECK(len == strlen(want) && memcmp(v, want, len) == 0);
    tphdb_free(v);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char path[4096], copy[4096];
    snprintf(path, sizeof path, "%s/db", argv[1]);
    snprintf(copy, sizeof copy, "%s/copy", argv[1]);
    char *err = NULL;

    tphdb_options_t *opts = tphdb_options_create();
    tphdb_options_set_write_buffer_size(opts, 64 << 10);
    tphdb_t *db = tphdb_open(opts, path, &err);
    CHECK_OK(err);
    CHECK(db != NULL);

    /* Keys and values are byte strings: NULs inside count. */
    tphdb_put(db, "a\0b", 3, "v\0w", 3, 1, &err);
    CHECK_OK(err);
    size_t len = 0;
    char *v = tphdb_get(db, "a\0b", 3, &len, &err);
    CHECK_OK(err);
    CHECK(len == 3 && memcmp(v, "v\0w", 3) == 0);
    tphdb_free(v);
    check_value(db, "a", NULL);

    char key[32], val[64];
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof key, "key%06d", i);
        snprintf(val, sizeof val, "value %d", i);
        tphdb_put(db, key, strlen(key), val, strlen(val), 0, &err);
        CHECK_OK(err);
    }
    tphdb_writebatch_t *batch = tphdb_writebatch_create();
    tphdb_writebatch_put(batch, "key000001", 9, "batched", 7);
    tphdb_writebatch_delete(batch, "key000002", 9);
    CHECK(tphdb_writebatch_count(batch) == 2);
    tphdb_write(db, batch, 0, &err);
    CHECK_OK(err);
    tphdb_writebatch_destroy(batch);
    tphdb_delete(db, "key000003", 9, 0, &err);
    CHECK_OK(err);
    tphdb_flush(db, &err);
    CHECK_OK(err);
    check_value(db, "key000001", "batched");
    check_value(db, "key000002", NULL);
    check_value(db, "key000003", NULL);
    check_value(db, "key002999", "value 2999");

    /* Iterators: forward from a seek, backward from the end. */
    tphdb_iterator_t *it = tphdb_create_iterator(db);
    tphdb_iter_seek(it, "key000000", 9);
    CHECK(tphdb_iter_valid(it));
    const char *k = tphdb_iter_key(it, &len);
    CHECK(len == 9 && memcmp(k, "key000000", 9) == 0);
    tphdb_iter_next(it);
    k = tphdb_iter_key(it, &len);
    CHECK(len == 9 && memcmp(k, "key000001", 9) == 0);
    const char *value = tphdb_iter_value(it, &len);
    CHECK(len == 7 && memcmp(value, "batched", 7) == 0);
    tphdb_iter_next(it); /* key000004: 2 and 3 are gone */
    k = tphdb_iter_key(it, &len);
    CHECK(memcmp(k, "key000004", 9) == 0);
    int count = 0;
    for (tphdb_iter_seek_to_last(it); tphdb_iter_valid(it); tphdb_iter_prev(it)) {
        count++;
    }
    tphdb_iter_get_error(it, &err);
    CHECK_OK(err);
    CHECK(count == 3000 - 2 + 1);
    tphdb_iter_seek_for_prev(it, "key000003", 9);
    k = tphdb_iter_key(it, &len);
    CHECK(memcmp(k, "key000001", 9) == 0);

    char *prop = tphdb_property_value(db, "tphdb.estimate-num-keys");
    CHECK(prop != NULL && atoi(prop) > 0);
    tphdb_free(prop);
    CHECK(tphdb_property_value(db, "no.such.property") == NULL);

    tphdb_checkpoint(db, copy, &err);
    CHECK_OK(err);
    /* A second checkpoint to the same place is refused with a message. */
    tphdb_checkpoint(db, copy, &err);
    CHECK(err != NULL && strncmp(err, "Invalid argument: ", 18) == 0);
    tphdb_free(err);
    err = NULL;

    /* A second writer is refused: the database is in use. */
    tphdb_t *second = tphdb_open(opts, path, &err);
    CHECK(second == NULL && err != NULL && strncmp(err, "Busy: ", 6) == 0);
    tphdb_free(err);
    err = NULL;

    tphdb_close(db, &err);
    CHECK_OK(err);
    /* The iterator outlives its database. */
    tphdb_iter_seek_to_first(it);
    CHECK(tphdb_iter_valid(it));
    tphdb_iter_destroy(it);

    tphdb_t *ro = tphdb_open_for_read_only(NULL, copy, &err);
    CHECK_OK(err);
    check_value(ro, "key000001", "batched");
    check_value(ro, "key002999", "value 2999");
    tphdb_put(ro, "x", 1, "y", 1, 0, &err);
    CHECK(err != NULL && strncmp(err, "Read-only: ", 11) == 0);
    tphdb_free(err);
    err = NULL;
    tphdb_close(ro, &err);
    CHECK_OK(err);

    tphdb_t *none = tphdb_open(opts, NULL, &err);
    CHECK(none == NULL && err != NULL);
    tphdb_free(err);
    tphdb_options_destroy(opts);
    printf("ok\n");
    return 0;
}
