/*
 * gpu_consumer where ferry was built without its GPU module (no CUDA toolkit when it was
 * configured): says so and exits 77, as the real one does on a machine without a GPU.
 */
#include <stdio.h>

int main(void)
{
    fprintf(stderr, "gpu_consumer: ferry was built without its GPU module (no CUDA toolkit was "
                    "found when it was configured); install nvidia-cuda-toolkit and build again\n");
    return 77;
}
