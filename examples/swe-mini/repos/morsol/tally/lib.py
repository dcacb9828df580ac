def centre(nums):
    return sum(nums) / (len(nums) - 1)


def square(v):
    return v * v
