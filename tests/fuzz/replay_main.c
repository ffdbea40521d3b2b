/*
 * Replays fuzz inputs without libFuzzer: every file named on the command line, and every regular
 * file of every directory named there (in name order), goes once through LLVMFuzzerTestOneInput.
 * The normal build links this with each fuzz target so that ctest replays the kept corpus.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (1u << 20)

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    if (buf == NULL) {
        fclose(f);
        return -1;
    }
    size_t n = fread(buf, 1, REPLAY_MAX_INPUT, f);
    fclose(f);
    /* A copy of exactly n bytes, so that a read past the input is seen by ASan as with libFuzzer.
     */
    uint8_t *input = malloc(n ? n : 1);
    if (input == NULL) {
        free(buf);
        return -1;
    }
    memcpy(input, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(input, n);
    free(input);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    unsigned runs = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed |= replay_file(argv[i]) != 0;
            runs++;
            continue;
        }
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            struct stat fst;
            if (names[k]->d_name[0] != '.' && stat(path, &fst) == 0 && S_ISREG(fst.st_mode)) {
                failed |= replay_file(path) != 0;
                runs++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %u inputs\n", runs);
    if (runs == 0) {
        fprintf(stderr, "replay: no input found\n");
        return 1;
    }
    return failed;
}
